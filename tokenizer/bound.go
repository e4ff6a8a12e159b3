package tokenizer

// minTokenser is implemented by tokenizers that can bound their output from below without
// tokenizing.
type minTokenser interface {
	minTokens(text string) int
}

// MinTokens returns a number of ids that t.Encode(text) is certain to reach, found in one pass
// over text that allocates little (at most a normalized copy), so that a caller can refuse a text
// too long for a context before paying for its tokenization. It is 0 when t offers no bound.
//
// Every bound rests on the same argument: each id Encode emits stands for a stretch of the text
// of at most K bytes, K being the longest piece (or the longest character, for symbols that are
// no piece), and every byte of the text that the bound counts is covered by some id. So
// len(Encode(text)) * K >= counted bytes, and the bound can never exceed the real count:
// refusing by it never refuses a text that would have fit.
func MinTokens(t Tokenizer, text string) int {
	if b, ok := t.(minTokenser); ok {
		return b.minTokens(text)
	}
	return 0
}

// ceilDiv is a/b rounded up, for a >= 0 and b > 0.
func ceilDiv(a, b int) int { return (a + b - 1) / b }

// minTokens: every input byte is covered by a merged symbol whose text is a piece, or by a
// byte-fallback piece that covers one byte, so K is the longest piece. The dummy-prefix space is
// an id that covers no input, which only adds to the count.
func (t *Llama2c) minTokens(text string) int { return ceilDiv(len(text), t.maxPiece) }

// minTokens: special pieces are matched as their own text; in a fragment, every symbol is a
// piece, or a single character (at most 4 bytes) that becomes the unknown id or one id per byte.
// Escaping a space as ▁ only lengthens the text a piece covers, so a piece of K bytes covers at
// most K input bytes. Removing extra whitespace drops spaces, so then only the other bytes count.
// Without an unknown id a character that is no piece emits nothing: no bound.
func (t *SentencePiece) minTokens(text string) int {
	if t.unk < 0 {
		return 0
	}
	n := len(text)
	if t.removeExtraWS {
		for i := 0; i < len(text); i++ {
			if text[i] == ' ' {
				n--
			}
		}
	}
	return ceilDiv(n, max(t.maxPiece, 4))
}

// minTokens: an added token covers its content; a segment between them is normalized and then
// covered byte for byte by ids, none longer than K bytes, when every byte has a token (a byte
// without one may be dropped, so then there is no bound). Normalization may shorten a segment
// (NFKC folds "ｆ" to "f"), so the normalized length is what counts; for text that is already
// normal the normalizers return it unchanged, without a copy.
func (t *BPE) minTokens(text string) int {
	for _, id := range t.byteID {
		if id < 0 {
			return 0
		}
	}
	covered := 0
	segment := func(s string) {
		if t.normalize != nil && s != "" {
			s = t.normalize(s)
		}
		covered += len(s)
	}
	last := 0
	for i := 0; i < len(text); {
		if !t.addedFirst[text[i]] {
			i++
			continue
		}
		_, n := t.addedTrie.longest(text[i:])
		if n == 0 {
			i++
			continue
		}
		segment(text[last:i])
		covered += n
		i += n
		last = i
	}
	segment(text[last:])
	return ceilDiv(covered, t.maxToken)
}
