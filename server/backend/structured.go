package backend

import (
	"errors"

	"github.com/dflash/dflash/runner"
	"github.com/dflash/dflash/sample/grammar"
	"github.com/dflash/dflash/server"
)

// constraint is the runner constraint for req's format on m's vocabulary, nil without a format.
// The vocabulary trie is built on the first constrained request (about 0.1-0.2 s for 151,936
// tokens) and kept; each request gets its own Constraint, whose mask cache serves its own
// repeating states (a long string's, say) and the sequences batched with it never share it.
func (m *Model) constraint(req server.GenRequest) (runner.Constraint, error) {
	if req.Format == nil {
		return nil, nil
	}
	if m.e.Tok == nil {
		return nil, errors.New("backend: structured output needs the model's tokenizer")
	}
	m.vocabOnce.Do(func() { m.vocab = buildVocab(m) })
	c := grammar.NewConstraint(req.Format, m.vocab)
	if req.Think == server.ThinkNone {
		return c, nil
	}
	open, okOpen := m.e.Tok.TokenID("<think>")
	closeID, okClose := m.e.Tok.TokenID("</think>")
	if !okClose || !okOpen && req.Think == server.ThinkMay {
		// The template thinks but the tags are not single tokens: constrain from the start
		// (a thinking model then answers without its block).
		return c, nil
	}
	if req.Think == server.ThinkInside {
		open = -1
	}
	return grammar.NewThinking(c, open, closeID), nil
}

// buildVocab lists each token's bytes for the grammar, leaving out added tokens (<|im_end|>,
// <think>, ...: their bytes are their names, never text the model spells) and keeping the
// end-of-sequence ids as the stops allowed where the output is complete.
func buildVocab(m *Model) *grammar.Vocab {
	tok := m.e.Tok
	added, _ := tok.(interface{ IsAdded(int) bool })
	toks := make([][]byte, tok.Vocab())
	for id := range toks {
		if added != nil && added.IsAdded(id) {
			continue
		}
		toks[id] = tok.TokenBytes(id)
	}
	return grammar.NewVocab(toks, m.e.Stop)
}
