package grammar

import (
	"slices"
	"testing"
)

// A thinking model's output: the first token may open the block; inside it anything but a stop
// goes; after </think> up to two whitespace tokens, then the grammar; stops only when whole.
func TestThinking(t *testing.T) {
	toks := [][]byte{[]byte("{"), []byte("}"), []byte("x"), []byte("\n"), []byte("<think>"), []byte("</think>"), []byte("<eos>")}
	const lb, rb, x, nl, open, close, eos = 0, 1, 2, 3, 4, 5, 6
	g, err := CompileSchema([]byte(`{"type":"object","additionalProperties":false}`))
	if err != nil {
		t.Fatal(err)
	}
	th := NewThinking(NewConstraint(g, NewVocab(toks, []int{eos})), open, close)
	allowed := func(s any) (ids []int) {
		m := th.Allowed(s, 0)
		for id := range toks {
			if m.Allows(id) {
				ids = append(ids, id)
			}
		}
		return ids
	}
	steps := []struct {
		tok  int
		want []int // allowed before tok
	}{
		{open, []int{lb, open}},
		{x, []int{lb, rb, x, nl, open, close}},
		{close, []int{lb, rb, x, nl, open, close}},
		{nl, []int{lb, nl}},
		{nl, []int{lb, nl}},
		{lb, []int{lb}},
		{rb, []int{rb}},
		{eos, []int{eos}},
	}
	s := th.Start()
	for i, st := range steps {
		if got := allowed(s); !slices.Equal(got, st.want) {
			t.Fatalf("step %d: allowed %v, want %v", i, got, st.want)
		}
		var ok bool
		if s, ok = th.Advance(s, st.tok); !ok {
			t.Fatalf("step %d: token %d refused", i, st.tok)
		}
	}
	if !th.Complete(s) {
		t.Error("not complete after {}")
	}
	// The prompt opened the block: decoding starts inside it.
	in := NewThinking(NewConstraint(g, NewVocab(toks, []int{eos})), -1, close)
	if got := in.Allowed(in.Start(), 0); got.Allows(eos) || !got.Allows(x) {
		t.Errorf("inside: eos %v, x %v", got.Allows(eos), got.Allows(x))
	}
}
