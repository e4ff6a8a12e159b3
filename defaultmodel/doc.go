// Package defaultmodel holds dflash's own default model pair — a small story-telling target and
// its DFlash draft, with their tokenizer — embedded in the binary so that `dflash run` works on a
// fresh machine with nothing downloaded. The files are trained by dflash's own commands from the
// shared TinyStories corpus (see reproduce.sh beside this file).
//
// Model loaders read folders, so the embedded files are copied once into a per-user cache folder
// named after their hash; this package never decides how a model is run.
package defaultmodel
