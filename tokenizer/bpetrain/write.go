package bpetrain

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// ChatML is the chat template WriteFiles puts in tokenizer_config.json when the special tokens
// include <|im_start|> and <|im_end|>: each message as <|im_start|>role\ncontent<|im_end|>\n, then
// the assistant header when a reply is wanted.
const ChatML = "{% for message in messages %}" +
	"{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}" +
	"{% endfor %}" +
	"{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"

// byteSpelling is GPT-2's bytes_to_unicode as Hugging Face's ByteLevel uses it: printable
// Latin-1 bytes spell themselves, the other 68 bytes U+0100 onwards in byte order, so every
// token's bytes have a printable, space-free spelling.
var byteSpelling = func() [256]rune {
	var m [256]rune
	next := rune(256)
	for b := 0; b < 256; b++ {
		if '!' <= b && b <= '~' || 0xA1 <= b && b <= 0xAC || 0xAE <= b && b <= 0xFF {
			m[b] = rune(b)
		} else {
			m[b] = next
			next++
		}
	}
	return m
}()

var spellsByte = func() map[rune]bool {
	m := map[rune]bool{}
	for _, r := range byteSpelling {
		m[r] = true
	}
	return m
}()

func spell(b []byte) string {
	rs := make([]rune, len(b))
	for i, c := range b {
		rs[i] = byteSpelling[c]
	}
	return string(rs)
}

// quote is a JSON string without Go's HTML escaping, so "<|im_end|>" reads as itself.
func quote(s string) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return string(bytes.TrimRight(b.Bytes(), "\n"))
}

// WriteJSON writes tokenizer.json: a BPE model whose vocab lists every id in order (special
// tokens by their content, the rest ByteLevel-spelled), merges as [left, right] pairs in rank
// order, the special tokens as added tokens, the normalizers asked for (else null), the
// pre-tokenizer Sequence[Split(Pattern, Isolated), ByteLevel(use_regex false)] and the ByteLevel
// decoder. The output is byte-identical for identical results.
func (r *Result) WriteJSON(w io.Writer) error {
	bw := bufio.NewWriter(w)
	p := func(format string, args ...any) { fmt.Fprintf(bw, format, args...) }
	nSpecial := len(r.cfg.Special)

	p("{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n  \"added_tokens\": [")
	for i, s := range r.cfg.Special {
		sep := ","
		if i == nSpecial-1 {
			sep = ""
		}
		p("\n    {\"id\": %d, \"content\": %s, \"single_word\": false, \"lstrip\": false, \"rstrip\": false, \"normalized\": false, \"special\": true}%s", i, quote(s), sep)
	}
	if nSpecial > 0 {
		p("\n  ")
	}
	p("],\n")

	var norms []string
	if r.cfg.NFC {
		norms = append(norms, `{"type": "NFC"}`)
	}
	if r.cfg.Lowercase {
		norms = append(norms, `{"type": "Lowercase"}`)
	}
	switch len(norms) {
	case 0:
		p("  \"normalizer\": null,\n")
	case 1:
		p("  \"normalizer\": %s,\n", norms[0])
	default:
		p("  \"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [%s, %s]},\n", norms[0], norms[1])
	}
	const byteLevel = `{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}`
	p("  \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [\n")
	p("    {\"type\": \"Split\", \"pattern\": {\"Regex\": %s}, \"behavior\": \"Isolated\", \"invert\": false},\n", quote(r.cfg.Pattern))
	p("    %s\n  ]},\n", byteLevel)
	p("  \"post_processor\": %s,\n", byteLevel)
	p("  \"decoder\": %s,\n", byteLevel)
	p("  \"model\": {\n    \"type\": \"BPE\",\n    \"dropout\": null,\n    \"unk_token\": null,\n")
	p("    \"continuing_subword_prefix\": null,\n    \"end_of_word_suffix\": null,\n")
	p("    \"fuse_unk\": false,\n    \"byte_fallback\": false,\n    \"ignore_merges\": false,\n")
	p("    \"vocab\": {")
	for id, tok := range r.tokens {
		name := spell(tok)
		if id < nSpecial {
			name = string(tok)
		}
		sep := ","
		if id == len(r.tokens)-1 {
			sep = ""
		}
		p("\n      %s: %d%s", quote(name), id, sep)
	}
	p("\n    },\n    \"merges\": [")
	for i, m := range r.merges {
		sep := ","
		if i == len(r.merges)-1 {
			sep = ""
		}
		p("\n      [%s, %s]%s", quote(spell(r.tokens[m[0]])), quote(spell(r.tokens[m[1]])), sep)
	}
	if len(r.merges) > 0 {
		p("\n    ")
	}
	p("]\n  }\n}\n")
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write tokenizer.json: %w", err)
	}
	return nil
}

// WriteFiles writes dir/tokenizer.json and dir/tokenizer_config.json, each atomically (a
// temporary file renamed over the target). eos must be one of the special tokens; the config
// names it eos_token, sets bos_token null and add_bos_token false, and carries ChatML as
// chat_template when <|im_start|> and <|im_end|> are special tokens.
func (r *Result) WriteFiles(dir string, eos string) error {
	isSpecial := map[string]bool{}
	for _, s := range r.cfg.Special {
		isSpecial[s] = true
	}
	if !isSpecial[eos] {
		return fmt.Errorf("write tokenizer files %s: eos %q is not a special token %q", dir, eos, r.cfg.Special)
	}
	var tj bytes.Buffer
	if err := r.WriteJSON(&tj); err != nil {
		return fmt.Errorf("write tokenizer files %s: %w", dir, err)
	}
	cfg := []byte("{\n")
	add := func(key string, value string) { cfg = fmt.Appendf(cfg, "  %s: %s,\n", quote(key), value) }
	add("tokenizer_class", quote("PreTrainedTokenizerFast"))
	add("add_bos_token", "false")
	add("add_prefix_space", "false")
	add("bos_token", "null")
	add("eos_token", quote(eos))
	add("pad_token", quote(eos))
	add("clean_up_tokenization_spaces", "false")
	if isSpecial["<|im_start|>"] && isSpecial["<|im_end|>"] {
		add("chat_template", quote(ChatML))
	}
	cfg = fmt.Appendf(cfg, "  \"model_max_length\": %d\n}\n", 1<<20)

	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("write tokenizer files: %w", err)
	}
	if err := writeAtomic(filepath.Join(dir, "tokenizer.json"), tj.Bytes()); err != nil {
		return err
	}
	return writeAtomic(filepath.Join(dir, "tokenizer_config.json"), cfg)
}

// writeAtomic writes data to path through a temporary file in the same folder, so a reader sees
// the old file or the whole new one, never a torn write.
func writeAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp, 0o644)
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
