// Command fakehub serves a model folder as a Hugging Face hub repository on loopback (the fake of
// package hubtest), for tests that drive dflash from another process: test/js's pull test.
//
//	fakehub -repo dflash/pulled -dir MODEL_FOLDER -addr-file FILE
package main

import (
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"

	"github.com/dflash/dflash/engine/ref/hubtest"
)

func main() {
	repo := flag.String("repo", "dflash/pulled", "repository id to serve the folder as")
	dir := flag.String("dir", "", "model folder whose files the repository holds")
	addr := flag.String("addr", "127.0.0.1:0", "listen address")
	addrFile := flag.String("addr-file", "", "write the bound address here once listening")
	flag.Parse()
	if err := run(*repo, *dir, *addr, *addrFile); err != nil {
		fmt.Fprintln(os.Stderr, "fakehub:", err)
		os.Exit(1)
	}
}

func run(repo, dir, addr, addrFile string) error {
	files, err := hubtest.ReadDir(dir)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	if addrFile != "" {
		if err := os.WriteFile(addrFile, []byte(ln.Addr().String()), 0o644); err != nil {
			return err
		}
	}
	return http.Serve(ln, hubtest.NewHub(repo, files))
}
