// Package train distils DFlash drafts (DFLASH.md sections 2 and 6) for a frozen model.Target:
// it builds the training data (the target's own continuations of prompts, greedy or sampled at
// the temperatures users sample at, with the target's top-K probabilities as soft targets,
// cached on disk with the recipe that made them; or raw text), learns the tokens, the soft
// targets or a mix of both (soft.go), runs the draft's forward and backward passes written here
// for every component (fc, RMSNorm, attention over context and block keys with RoPE, SwiGLU, the
// borrowed embedding and output head), optimises with AdamW, checkpoints so an interrupted run
// resumes bitwise identically, and writes the draft in z-lab's Hugging Face layout (config.json
// and model.safetensors) for the normal loader. DFlash2 drafts (DraftConfig.Arch "dflash2",
// d2.go) add the grouped dynamic convolutions and the candidate selector, trained with the
// public objective.
//
// It also trains small targets (TrainTarget, lm*.go): a Qwen3-architecture causal LM learned from
// text with the same layers and optimizer, written as a Hugging Face folder, and scored in bits per
// byte (EvalBPB) so models with different tokenizers compare.
//
// The draft forward here must match model/dflash's inference forward exactly; the package
// never changes the target (its weights, embedding and head stay frozen) and never writes
// outside the directories it is given.
package train
