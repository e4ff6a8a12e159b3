// Package runner owns one request's decode loop, alone or batched with others (Batcher: one
// target forward per step over the rows of every running generation, each on its own
// sequence): prompt prefill with prefix reuse, plain
// decoding, speculative rounds (a session proposes, one target forward verifies, the target cache
// is rewound to the last kept row), the DFlash drafting sessions, the depth policy and the
// statistics of a request. A target cache that cannot rewind (a hybrid target's recurrent state)
// is cut back instead by restoring the kept row's snapshot (cache.RowSnapshots); a new prompt
// reuses its rows when all of them prefix it, else resumes from the longest state checkpoint within
// the shared prefix (CheckpointPolicy: every few prefill rows and at each prompt's end).
//
// Speculation has two lifetimes. A Drafter is per model pair and long-lived: it holds the draft
// (weights live in the model) and its depth policy, whose adaptive controller learns across
// requests. A Session is per sequence: it holds the draft cache and the context rows not yet
// written, and lives as long as the sequence does. Whoever opens a session closes it; Generate
// only restores it at the start of a request and settles it at the end. The depth policy (Fixed
// or Adaptive) applies to any drafter alike; a seeded request drafts a fixed depth, so that its
// output reproduces (Depth.Seeded), unless it samples coupled (sample.Options.Coupled), whose
// output does not depend on the draft or the depth at all.
//
// It must never touch weights or kernels (models do), never decide how a token is drawn from a
// distribution (package sample does), and never let a rejected draft leave a trace: every token
// it emits has exactly the distribution plain decoding with the target would give, and at
// temperature 0 exactly the same tokens.
package runner
