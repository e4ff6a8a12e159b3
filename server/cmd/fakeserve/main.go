// Command fakeserve serves dflash's HTTP API over the fake backend, so client compatibility
// tests (test/js) can run without model weights. It is a test tool, never a real server.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/dflash/dflash/server"
	"github.com/dflash/dflash/server/fake"
)

func main() {
	addr := flag.String("addr", server.AddrFromEnv(), "listen address (127.0.0.1:0 picks a free port)")
	addrFile := flag.String("addr-file", "", "write the bound address to this file once listening")
	delay := flag.Duration("token-delay", 5*time.Millisecond, "delay before each generated token")
	ctxLen := flag.Int("ctx", 64, "context length of the fake models")
	flag.Parse()

	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	// fake-tools has a template with tools and thinking, and follows the fake's script.
	b := &fake.Backend{TokenDelay: *delay, ContextLength: *ctxLen,
		Names: []string{"fake:latest", "fake-draft:latest", "fake-tools:latest"}}
	srv := server.New(server.Config{Addr: *addr, Version: "0.0.0-fake"}, b, log)

	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fakeserve:", err)
		os.Exit(1)
	}
	if *addrFile != "" {
		if err := os.WriteFile(*addrFile, []byte(ln.Addr().String()), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "fakeserve:", err)
			os.Exit(1)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := srv.Serve(ctx, ln); err != nil {
		fmt.Fprintln(os.Stderr, "fakeserve:", err)
		os.Exit(1)
	}
}
