// Package server owns dflash's HTTP APIs: the ollama-compatible /api/* endpoints, the
// OpenAI-compatible /v1/* endpoints, the model manager (load on first use, unload after
// keep-alive), the fair FIFO request scheduler, Prometheus metrics and request logging.
//
// It speaks to models only through the Backend and Model interfaces and must never know about
// weights, kernels, tokenizers or speculation internals: it tokenizes, renders chat templates
// and generates by asking a Model, and it reports the counters a Model returns.
//
// Decisions on unsupported input (each answered with a 4xx that names the field):
//   - ollama: images, suffix and context are rejected; template is ignored (the model's own
//     template is used) and logged; unknown options (num_thread, num_gpu, mirostat, ...) are
//     ignored.
//   - OpenAI: n other than 1, functions, logit_bias, echo, best_of > 1, suffix and non-text
//     content parts are rejected.
//   - Structured output (format "json" or a schema; response_format json_object or
//     json_schema) decodes under a grammar compiled by sample/grammar; a schema keyword it cannot
//     enforce is refused with a 400 naming its path (e.g. format.properties.age.multipleOf), and
//     a format together with tools is refused (the grammar would keep the model from calling).
//
// Log probabilities (ollama's logprobs/top_logprobs, OpenAI's chat logprobs/top_logprobs and
// completions' logprobs N, 0..20 alternatives) are the model's own distribution: log-softmax at
// temperature 1 of the raw logits, before penalties, temperature and the top-k/top-p/min-p
// filters (ollama's choice, and what OpenAI documents as the token's likelihood). With a draft
// they are the target's, from the verification forward's rows, bitwise what plain decoding gives.
// Streamed, each chunk carries the tokens whose text it shows; tokens whose text never shows
// (held back, then cut by a stop string) come on the last chunk.
//
// Embeddings (/api/embed, /api/embeddings, /v1/embeddings) go through an optional Embedder on the
// Model: the server tokenizes, truncates (ollama's /api/embed keeps the first tokens that fit;
// OpenAI's refuses), normalizes to unit length as ollama's /api/embed and OpenAI do (not the older
// /api/embeddings) and cuts to dimensions; the model pools its rows. An embedding takes a
// scheduler slot like a generation.
//
// Scheduling: each model runs at most its Parallel generations at once (ModelInfo.Parallel, else
// Config.Parallel; a Model decodes them together); later requests for it wait in FIFO order in
// the model's own queue. A full queue answers 503 with Retry-After; a request that cannot start within
// Config.QueueTimeout answers 503 with Retry-After. A client that disconnects cancels its
// generation at the next token (the Model checks its context) and frees its place.
// A client that stops reading is cut when a write misses Config.WriteTimeout, which frees its
// place the same way. Shutdown answers queued requests at once and gives running ones the
// grace period, then ends them with an error in their API's framing.
//
// Exposure: browser pages may call only from allowed origins (loopback ones and
// Config.Origins), a loopback-bound server answers only local Host names, Config.APIKey guards
// every endpoint but /health, and 500 answers carry no server paths.
package server
