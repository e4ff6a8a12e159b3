// Package runner owns one request's decode loop: prompt prefill with prefix reuse, plain
// decoding, speculative rounds (a drafter proposes, one target forward verifies, the target cache
// is rewound to the last kept row), the DFlash drafting session, the depth controller and the
// statistics of a request.
//
// It must never touch weights or kernels (models do), never decide how a token is drawn from a
// distribution (package sample does), and never let a rejected draft leave a trace: every token
// it emits has exactly the distribution plain decoding with the target would give, and at
// temperature 0 exactly the same tokens.
package runner
