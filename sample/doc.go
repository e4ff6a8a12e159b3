// Package sample owns how a token is chosen from a model's logits: a request's sampling Options,
// the filtered probability Distribution (penalties, temperature, top-k, top-p, min-p), draws from
// it with randomness keyed by the seed and the position, and the rejection-sampling primitives
// (Accept, Residual) that make speculative verification exact (DFLASH.md section 1), and the
// coupled race (Options.Coupled, Sampler.Race: Gumbel-max with noise keyed by seed, position and
// token) under which a draft and the target choose with the same noise, so the output does not
// depend on the draft. A Mask restricts the ids a constrained request may emit (its logits are
// copied with the others at -Inf, before every filter); sample/grammar computes masks from a JSON
// schema for structured output.
//
// It must never know about models, caches or drafts: it sees logits, token ids and histories
// only. It never modifies the logits or histories it is given, never panics on them (NaN logits
// are treated as -Inf, out-of-range history ids are ignored), and allocates nothing per token
// once a Sampler's scratch has grown to the vocabulary.
//
// Filter order, applied by Distribution:
//
//	penalties -> temperature -> top-k -> softmax -> top-p -> min-p -> renormalise
//
// This is ollama's order and Hugging Face's (temperature is a logits warper that runs before
// the top-k/top-p warpers), not llama.cpp's default chain, which applies temperature last so
// its top-p and min-p see the untempered distribution. We scale first because then every
// filter acts on the distribution that is actually sampled: top_p = 0.8 means 80% of the mass
// the user will draw from, and the draft's proposal q, built with the same Options, filters the
// same way, which DFLASH.md section 1 requires. Top-k does not depend on the temperature
// (scaling keeps the order), so it runs on raw logits. Top-p runs on the softmax of the top-k
// survivors (renormalised), and min-p compares to the largest probability, a ratio that
// renormalising does not change.
//
// Ties: top-k keeps the lower id at its boundary; sorted candidates order equal logits by
// ascending id, so top-p's prefix is deterministic too.
package sample
