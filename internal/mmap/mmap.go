// Package mmap owns mapping a whole weight file into memory read-only, for the file formats
// (safetensors, GGUF) that hand out tensor views into it. It must never map writable: views
// into a mapping are shared with the page cache, and a write would change the file on disk.
package mmap
