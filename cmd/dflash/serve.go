package main

import (
	"context"
	"flag"
	"fmt"
	"github.com/dflash/dflash/engine"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/dflash/dflash/kernel"
	"github.com/dflash/dflash/runner/depthcache"
	"github.com/dflash/dflash/server"
	"github.com/dflash/dflash/server/backend"
)

// modelSpecs collects repeated --model/--draft/--name flags in order: each --model starts a
// model, and --draft and --name apply to the latest one.
type modelSpecs struct{ specs []backend.Spec }

func (m *modelSpecs) register(fs *flag.FlagSet) {
	fs.Func("model", "model to serve: a Hugging Face folder, a llama2.c checkpoint, an ollama name or a Hugging Face id (repeatable)", func(s string) error {
		m.specs = append(m.specs, backend.Spec{Path: s})
		return nil
	})
	fs.Func("draft", "DFlash draft folder, Hugging Face id or 'auto' for the preceding --model", func(s string) error {
		if len(m.specs) == 0 {
			return fmt.Errorf("--draft %s comes before any --model", s)
		}
		m.specs[len(m.specs)-1].Draft = s
		return nil
	})
	fs.Func("name", "request name of the preceding --model (default: its file or folder name, tag :latest)", func(s string) error {
		if len(m.specs) == 0 {
			return fmt.Errorf("--name %s comes before any --model", s)
		}
		m.specs[len(m.specs)-1].Name = s
		return nil
	})
}

func cmdServe(args []string, _ io.Reader, stdout, stderr io.Writer) error {
	fs := newFlags("serve", stderr)
	var ms modelSpecs
	ms.register(fs)
	host := fs.String("host", server.AddrFromEnv(), "listen address (env DFLASH_HOST; 127.0.0.1:0 picks a free port)")
	modelsFile := fs.String("models", "", "models file: one \"name path [draft]\" per line (instead of --model)")
	parallel := fs.Int("parallel", 0, "generations each model decodes together (0: from the memory a sequence needs, at most 4)")
	maxQueue := fs.Int("max-queue", 64, "requests waiting for a slot before 503 (< 0: unlimited)")
	queueTimeout := fs.Duration("queue-timeout", 2*time.Minute, "longest wait for a slot before 503 (< 0: unlimited)")
	keepAlive := fs.Duration("keep-alive", 5*time.Minute, "idle time before a model unloads (< 0: never)")
	maxLoaded := fs.Int("max-loaded", 1, "idle models kept loaded at once (< 0: unlimited)")
	ctxLen := fs.Int("ctx", backend.DefaultContext, "context length cap in tokens (the model's own maximum if lower)")
	logFormat := fs.String("log", "text", "log format on standard error: text or json")
	kernelPath := fs.String("kernel", "", "kernel path (default: fastest; env DFLASH_KERNEL)")
	kvCache := fs.String("kv-cache", "auto", kvCacheUsage)
	addrFile := fs.String("addr-file", "", "write the bound address to this file once listening (for scripts and tests)")
	apiKey := fs.String("api-key", "", "bearer token every endpoint but /health requires (env DFLASH_API_KEY)")
	writeTimeout := fs.Duration("write-timeout", 30*time.Second, "cut a client that does not take a response write within this (< 0: never)")
	readTimeout := fs.Duration("read-timeout", time.Minute, "longest time to receive a request body (< 0: unlimited)")
	idleTimeout := fs.Duration("idle-timeout", 2*time.Minute, "close keep-alive connections idle this long (< 0: never)")
	skipBroken := fs.Bool("skip-broken", false, "list a model that fails its startup checks as unavailable, with its error, instead of exiting")
	coupled := fs.String("coupled", "seeded", "which requests sample coupled (the same seed gives the same tokens with or without the draft, at any depth): seeded (those that give a seed), always, never")
	grace := fs.Duration("grace", 30*time.Second, "on SIGINT/SIGTERM, time running generations get to finish (a second signal exits at once)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected arguments %q", fs.Args())
	}
	var log *slog.Logger
	switch *logFormat {
	case "text":
		log = slog.New(slog.NewTextHandler(stderr, nil))
	case "json":
		log = slog.New(slog.NewJSONHandler(stderr, nil))
	default:
		return usagef("--log %q: want text or json", *logFormat)
	}
	if *kernelPath != "" {
		if err := kernel.SetPath(*kernelPath); err != nil {
			return usagef("--kernel: %v", err)
		}
	}
	if err := setKVCache(*kvCache); err != nil {
		return err
	}
	specs := ms.specs
	switch {
	case *modelsFile != "" && len(specs) > 0:
		return usagef("give --model or --models, not both")
	case *modelsFile != "":
		var err error
		if specs, err = backend.ParseModelsFile(*modelsFile); err != nil {
			return err
		}
	case len(specs) == 0:
		return usagef("no models: give --model PATH [--draft DIR] [--name NAME] (repeatable) or --models FILE")
	}
	if *parallel < 0 {
		return usagef("--parallel %d: must be >= 0 (0 picks it per model)", *parallel)
	}
	coupling, err := server.ParseCoupling(*coupled)
	if err != nil {
		return usagef("--coupled: %v", err)
	}
	if *grace <= 0 {
		return usagef("--grace %v: must be > 0", *grace)
	}
	if *apiKey == "" {
		// Read here rather than as the flag's default, which --help would print.
		*apiKey = os.Getenv("DFLASH_API_KEY")
	}
	// Every model's files are checked here, weights' headers included, so a broken one ends
	// the start naming it (or, with --skip-broken, is listed as unavailable).
	// Each drafted pair's depth controller starts from what earlier serves learned and saves what
	// it learns (runner/depthcache); without a user cache folder it starts cold.
	costs, err := depthcache.Dir()
	if err != nil {
		log.Warn("depth controllers start cold", "err", err)
		costs = ""
	}
	b, err := backend.New(backend.Options{Models: specs, Context: *ctxLen, SkipBroken: *skipBroken, DepthCache: costs, Parallel: *parallel})
	if err != nil {
		return err
	}
	// The server's zero values mean "default"; the flags' negative values mean "unlimited".
	cfg := server.Config{Addr: *host, Parallel: max(*parallel, 1), MaxQueue: *maxQueue, QueueTimeout: *queueTimeout,
		KeepAlive: *keepAlive, MaxLoaded: *maxLoaded, Version: version, ShutdownTimeout: *grace,
		WriteTimeout: *writeTimeout, ReadTimeout: *readTimeout, IdleTimeout: *idleTimeout,
		APIKey: *apiKey, Origins: server.OriginsFromEnv(), Coupling: coupling}
	srv := server.New(cfg, b, log)
	ln, err := net.Listen("tcp", server.ParseHost(*host))
	if err != nil {
		return fmt.Errorf("listen %s: %w", *host, err)
	}
	addr := ln.Addr().String()
	if *addrFile != "" {
		if err := os.WriteFile(*addrFile, []byte(addr), 0o644); err != nil {
			ln.Close()
			return fmt.Errorf("--addr-file: %w", err)
		}
	}
	for _, m := range b.Models() {
		if m.Error != "" {
			log.Error("model unavailable", "name", m.Name, "err", m.Error)
			continue
		}
		log.Info("model", "name", m.Name, "family", m.Family, "parameters", m.ParameterSize, "draft", m.Draft, "parallel", m.Parallel)
		if d, ok := b.Describe(m.Name); ok && d.TextOnly {
			log.Info(engine.TextOnlyNotice, "name", m.Name)
		}
	}
	fmt.Fprintf(stdout, "dflash %s listening on http://%s\n", version, addr)
	sigs, stopSignals := serveSignals()
	defer stopSignals()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	defer close(done)
	go onSignals(sigs, cancel, done, log, *grace)
	return srv.Serve(ctx, ln)
}

// serveSignals delivers SIGINT and SIGTERM. Tests replace it to stop the server in-process.
var serveSignals = func() (<-chan os.Signal, func()) {
	c := make(chan os.Signal, 2)
	signal.Notify(c, os.Interrupt, syscall.SIGTERM)
	return c, func() { signal.Stop(c) }
}

// exitNow ends the process without draining. Tests replace it.
var exitNow = os.Exit

// onSignals starts the graceful shutdown at the first signal and exits at once at the second,
// so an operator who will not wait out the grace period need not reach for kill -9. It
// returns when done is closed (serving ended).
func onSignals(sigs <-chan os.Signal, cancel context.CancelFunc, done <-chan struct{}, log *slog.Logger, grace time.Duration) {
	select {
	case sig := <-sigs:
		log.Info("signal: shutting down (send it again to exit at once)", "signal", sig.String(), "grace", grace)
		cancel()
	case <-done:
		return
	}
	select {
	case sig := <-sigs:
		log.Warn("second signal: exiting without draining", "signal", sig.String())
		exitNow(signalExitCode(sig))
	case <-done:
	}
}

// signalExitCode is the shell's convention for a process ended by sig: 128 + its number.
func signalExitCode(sig os.Signal) int {
	if s, ok := sig.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return 1
}
