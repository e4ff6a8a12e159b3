package runner_test

import (
	"context"
	"math"
	"slices"
	"testing"

	"github.com/dflash/dflash/model"
	"github.com/dflash/dflash/runner"
)

// TestEmbedPools: the pooled vector is the mean (first, last) of the rows one whole-text forward
// returns as Request.Hidden, whatever the chunking, and bad input is an error.
func TestEmbedPools(t *testing.T) {
	target := tinyQwen3(t, 60, 2)
	hidden := target.Config().Hidden
	tokens := []int{5, 9, 1, 33, 47, 12, 8, 8, 2, 59, 0}
	res, err := target.Forward(target.NewCache(64), model.Request{Tokens: tokens, Hidden: true})
	if err != nil {
		t.Fatal(err)
	}
	rows := slices.Clone(res.Hidden)
	mean := make([]float32, hidden)
	for j := range mean {
		var s float64
		for r := range tokens {
			s += float64(rows[r*hidden+j])
		}
		mean[j] = float32(s / float64(len(tokens)))
	}
	for _, c := range []struct {
		pool runner.Pooling
		want []float32
	}{
		{runner.PoolMean, mean},
		{runner.PoolFirst, rows[:hidden]},
		{runner.PoolLast, rows[(len(tokens)-1)*hidden:]},
	} {
		for _, chunk := range []int{0, 1, 4} {
			got, err := runner.Embed(context.Background(), target, tokens, c.pool, chunk)
			if err != nil {
				t.Fatal(err)
			}
			// Chunked forwards give the rows' bits of one forward (a row does not depend on the
			// rows beside it), so the pooled values match to the last bit too.
			if !slices.Equal(got, c.want) {
				t.Errorf("%v chunk %d: %v, want %v", c.pool, chunk, got[:4], c.want[:4])
			}
		}
	}
	var norm float64
	for _, v := range mean {
		norm += float64(v) * float64(v)
	}
	if norm == 0 || math.IsNaN(norm) {
		t.Errorf("mean embedding has norm %v", norm)
	}
	for _, bad := range [][]int{nil, {1, 60}, make([]int, 513)} {
		if _, err := runner.Embed(context.Background(), target, bad, runner.PoolMean, 0); err == nil {
			t.Errorf("Embed(%d tokens ending %v) succeeded", len(bad), bad[max(0, len(bad)-1):])
		}
	}
}
