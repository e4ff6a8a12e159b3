package backend_test

import (
	"context"
	"sync"
	"testing"
)

// TestCloseWaitsForEmbeddings: closing a model while embeddings run on it waits for the
// running one (its engine is not dropped under it) and refuses the next with an error; the
// tokenizer's suffix reads nothing of a closed model. Run under -race.
func TestCloseWaitsForEmbeddings(t *testing.T) {
	for range 4 {
		m := loadStories(t, false)
		prompt, err := m.Tokenize("Once upon a time")
		if err != nil {
			t.Fatal(err)
		}
		started := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			for i := 0; ; i++ {
				_, err := m.Embed(context.Background(), prompt)
				m.EmbedSuffix()
				if i == 0 {
					close(started)
				}
				if err != nil {
					return
				}
			}
		})
		<-started
		if err := m.Close(); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		if _, err := m.Embed(context.Background(), prompt); err == nil {
			t.Error("a closed model embedded")
		}
		if s := m.EmbedSuffix(); s != nil {
			t.Errorf("a closed model's suffix is %v", s)
		}
	}
}
