package sample

import (
	"math"

	"github.com/dflash/dflash/internal/splitmix"
)

// Coupled sampling (Options.Coupled) chooses every position's token by an exponential race: each
// token id gets an Exp(1) arrival time E(pos, id), a hash of (Options.Seed, pos, id), and the
// token chosen from a distribution P is the one with the smallest E(pos, id) / P(id). That is the
// Gumbel-max trick written without logarithms of P (argmax log P + G with G = -log E is argmin
// E / P), so it samples exactly P: the noise at a position is independent of everything decided
// before it. What it adds over a plain Draw is that the noise belongs to the position, not to the
// purpose: a draft racing its own proposal q with the same arrival times picks the target's token
// whenever q is close to p, and verification keeps a draft while it equals the target's race
// winner. The output is then a function of the seed and the target alone, identical with any
// draft at any depth, and without one.
//
// An arrival time is O(1) to compute for any id (counter-based, like Uniform), so a race over a
// sparse distribution costs its support, and a dense one a hash and a comparison per token: a
// token can win only if its E is below r·P(id), r the best ratio so far, and E >= 1 - u (u the
// hashed uniform), so the logarithm is taken only for the few ids that pass 1 - u < r·P(id).

// drawRace is the purpose constant that roots a position's arrival times, distinct from every
// Purpose a Uniform draw uses, so the race is independent of them.
const drawRace Purpose = 0x80

// raceRoot is the key of position pos's arrival times.
func (s *Sampler) raceRoot(pos int) uint64 {
	return splitmix.Mix(splitmix.Mix(s.key^uint64(pos)) ^ uint64(drawRace))
}

// raceUniform is the uniform in (0, 1) behind id's arrival time at the position of root: the
// SplitMix64 output at index id of the stream that starts at root, so ids need not be drawn in
// order. Half a unit of the last place keeps it off 0 (E would be infinite) and off 1 (E = 0).
func raceUniform(root uint64, id int) float64 {
	h := splitmix.Mix(root + uint64(id)*0x9e3779b97f4a7c15)
	return (float64(h>>11) + 0.5) / (1 << 53)
}

// Arrival is id's Exp(1) arrival time at position pos: -ln u for the hashed uniform u. Tests and
// diagnostics use it; Race computes the same values.
func (s *Sampler) Arrival(pos, id int) float64 {
	return -math.Log(raceUniform(s.raceRoot(pos), id))
}

// Race is the token coupled sampling chooses at position pos from d: the id of d's support with
// the smallest Arrival(pos, id) / P(id), the lower id winning an exact tie; -1 for an empty d. d
// is not modified. Its result equals that of evaluating every ratio (the pruning is exact, up to a
// margin of a few ulps that only lets more ids through to the exact comparison).
func (s *Sampler) Race(d *Distribution, pos int) int {
	n := d.Len()
	if n == 0 {
		return -1
	}
	root := s.raceRoot(pos)
	// Start from the most probable entry (entry 0 when sparse) so the bound r is tight at once.
	first := 0
	if d.IDs == nil {
		for i, p := range d.P {
			if p > d.P[first] {
				first = i
			}
		}
	}
	if !(d.P[first] > 0) {
		return d.ID(first)
	}
	best := d.ID(first)
	r := -math.Log(raceUniform(root, best)) / float64(d.P[first])
	for i, p32 := range d.P {
		if !(p32 > 0) || i == first {
			continue
		}
		id, p := d.ID(i), float64(p32)
		u := raceUniform(root, id)
		// E = -ln u >= 1 - u: an id whose 1 - u already exceeds r·p cannot beat r. The margins
		// (2^-52 absolute on 1 - u, 2^-50 relative on r·p) cover the rounding of both sides.
		if 1-u-0x1p-52 > r*p*(1+0x1p-50) {
			continue
		}
		ratio := -math.Log(u) / p
		if ratio < r || ratio == r && id < best {
			r, best = ratio, id
		}
	}
	return best
}
