package sample

import (
	"math"
	"slices"

	"github.com/dflash/dflash/internal/splitmix"
)

// expCutoff bounds the tempered logit distance d = (max - z) / T below which a token's weight
// exp(-d) is computed in the full-vocabulary paths. A token further away weighs less than
// e^-32 = 1.3e-14 of the top token; 151,936 of them change the normaliser by < 2e-9 relative,
// far below float32 resolution, so skipping them loses nothing measurable and saves the exps.
const expCutoff = 32

// binsPerUnit sets the histogram resolution of the top-p pre-filter (bins of 1/8 nat).
const binsPerUnit = 8

const nBins = expCutoff * binsPerUnit

type cand struct {
	v  float32 // effective logit (after penalties, before temperature)
	id int32
}

// before orders candidates as a sparse Distribution lists them: larger logit first, lower id
// first among equals.
func before(a, b cand) bool { return a.v > b.v || (a.v == b.v && a.id < b.id) }

func cmpCand(a, b cand) int {
	if before(a, b) {
		return -1
	}
	if before(b, a) {
		return 1
	}
	return 0
}

// Sampler turns logits into tokens for one request. It holds the options, the key its draws
// derive from (see Uniform) and scratch buffers sized to the vocabulary, so steady-state calls do
// not allocate. A Sampler is not safe for concurrent use.
type Sampler struct {
	opt Options
	key uint64 // splitmix.Mix(Options.Seed): the root every draw's randomness is hashed from

	// count[id] is how often id occurs in the current penalty window; nonzero marks a penalised
	// id, whose effective logit is adj[id]. Both are reset after every call (only the touched
	// ids, listed in penIDs), so a call costs O(window) for penalties, not O(vocab).
	count  []int32
	adj    []float32
	penIDs []int32

	z     []float32 // effective logits when penalties apply on a full-vocabulary path
	cands []cand
	hist  [nBins]float64
	dist  Distribution // Sample's distribution
	resid Distribution // Resample's residual
}

// New makes a sampler for a vocabulary of vocab tokens (scratch grows if larger logits come).
// Options are used as given; call Options.Validate first to reject bad requests.
func New(o Options, vocab int) *Sampler {
	// Mixing the seed first makes nearby seeds (a test's seed+i, a client's 1, 2, 3) unrelated
	// keys, and seed 0 as good as any other.
	s := &Sampler{opt: o, key: splitmix.Mix(o.Seed)}
	s.grow(vocab)
	return s
}

// Options returns the options the sampler was made with.
func (s *Sampler) Options() Options { return s.opt }

func (s *Sampler) grow(vocab int) {
	if vocab <= len(s.count) {
		return
	}
	s.count = make([]int32, vocab)
	s.adj = make([]float32, vocab)
	s.z = make([]float32, vocab)
}

// Purpose names what a draw at a position decides. Each (position, purpose) has its own
// uniform, so the draws that may meet at one position are independent of each other: the draft
// token, its accept test, and the correction drawn after a rejection must be, or speculation would
// not be exact.
type Purpose uint8

const (
	// DrawToken is the target choosing a position's token from p alone: plain decoding, and a
	// speculative round's bonus token. Plain and speculative decoding draw the same uniform there.
	DrawToken Purpose = iota + 1
	// DrawDraft is a draft proposing the token at a position from q.
	DrawDraft
	// DrawAccept is the accept test of the draft token at a position.
	DrawAccept
	// DrawResidual is the correction drawn at the first rejected position.
	DrawResidual
)

// Uniform is the float64 in [0, 1) that a draw for purpose why at sequence position pos uses (pos
// is the index, from 0 at the prompt's first token, of the token being decided). It is a hash of
// (Options.Seed, pos, why) with SplitMix64's finaliser, not the next value of a stream: counter
// based, so the draws for position p do not depend on how many draws earlier positions or
// rounds made, and a seeded request replays whatever depths its rounds had. Distinct keys give
// independent-looking uniforms (SplitMix64 is a bijective, well-mixed hash; the tests check
// uniformity and the independence of the purposes at one position).
//
// A position's uniform may be drawn more than once: a round that rejects at position p discards
// its drafts after p, and the next round drafts p+1 again with the same DrawDraft uniform. That
// keeps verification exact, because a discarded draft left no trace: nothing emitted depends on
// it, so its uniform is still independent of everything committed when it is used again.
func (s *Sampler) Uniform(pos int, why Purpose) float64 {
	h := splitmix.Mix(splitmix.Mix(s.key^uint64(pos)) ^ uint64(why))
	return float64(h>>11) / (1 << 53)
}

// penaltyWindow is the part of history penalties look at.
func (s *Sampler) penaltyWindow(history []int) []int {
	w := s.opt.PenaltyWindow
	if w == 0 {
		w = DefaultPenaltyWindow
	}
	if w > 0 && len(history) > w {
		return history[len(history)-w:]
	}
	return history
}

// penalise records the penalised ids of the window and their effective logits. Each distinct
// token is penalised once by the repeat and presence penalties and count times by the
// frequency penalty; ids outside the vocabulary are ignored.
func (s *Sampler) penalise(logits []float32, history []int) {
	s.penIDs = s.penIDs[:0]
	if !s.opt.penaltiesActive() {
		return
	}
	v := len(logits)
	for _, t := range s.penaltyWindow(history) {
		if t < 0 || t >= v {
			continue
		}
		if s.count[t] == 0 {
			s.penIDs = append(s.penIDs, int32(t))
		}
		s.count[t]++
	}
	rp := s.opt.RepeatPenalty
	repeat := rp > 0 && rp != 1
	for _, id := range s.penIDs {
		l := logits[id]
		if repeat {
			if l > 0 {
				l /= rp
			} else {
				l *= rp
			}
		}
		l -= s.opt.PresencePenalty
		l -= float32(s.count[id]) * s.opt.FrequencyPenalty
		s.adj[id] = l
	}
}

func (s *Sampler) clearPenalties() {
	for _, id := range s.penIDs {
		s.count[id] = 0
	}
	s.penIDs = s.penIDs[:0]
}

// effective is the logits with penalties applied: the caller's slice itself when nothing is
// penalised, else a copy in scratch.
func (s *Sampler) effective(logits []float32) []float32 {
	if len(s.penIDs) == 0 {
		return logits
	}
	z := s.z[:len(logits)]
	copy(z, logits)
	for _, id := range s.penIDs {
		z[id] = s.adj[id]
	}
	return z
}

// argmax is Argmax of the effective logits without copying them: penalised ids are skipped in
// the scan and compared afterwards with their adjusted logits under the same tie rule.
func (s *Sampler) argmax(logits []float32) int {
	if len(s.penIDs) == 0 {
		return Argmax(logits)
	}
	best, bi := float32(math.Inf(-1)), -1
	for i, v := range logits {
		if v > best && s.count[i] == 0 {
			best, bi = v, i
		}
	}
	for _, id := range s.penIDs {
		v := s.adj[id]
		if v > best || (v == best && bi >= 0 && int(id) < bi) {
			best, bi = v, int(id)
		}
	}
	if bi < 0 {
		return firstNotNaN(s.effective(logits))
	}
	return bi
}

// Distribution turns raw logits into the filtered distribution (see the filter order above):
// sparse when top-k, top-p or min-p is on, dense (P over the whole vocabulary) when only the
// temperature applies, and the sparse one-hot of the penalised argmax at temperature 0.
// Penalties use the last window of history. dst's buffers are reused; logits and history are
// not modified.
func (s *Sampler) Distribution(dst *Distribution, logits []float32, history []int) {
	if len(logits) == 0 {
		dst.setSparse(0)
		return
	}
	s.grow(len(logits))
	s.penalise(logits, history)
	defer s.clearPenalties()
	if s.opt.Greedy() {
		dst.OneHot(s.argmax(logits))
		return
	}
	invT := 1 / s.opt.Temperature
	if k := s.opt.TopK; k > 0 && k < len(logits) {
		s.topK(logits, k)
		s.finish(dst, s.cands, invT, 0)
		return
	}
	z := s.effective(logits)
	if s.opt.topPActive() || s.opt.minPActive() {
		s.prefilter(dst, z, invT)
		return
	}
	s.dense(dst, z, invT)
}

// topK leaves the k best effective logits in s.cands, sorted. A min-heap of the k best so far
// (root = the worst kept) makes the scan one comparison per token once the heap is full:
// O(V + k log k · replacements) instead of sorting 151,936 entries.
func (s *Sampler) topK(logits []float32, k int) {
	h := s.cands[:0]
	push := func(c cand) {
		if len(h) < k {
			h = append(h, c)
			// Sift up: the worst (the one every other sorts before) rises to the root.
			for i := len(h) - 1; i > 0; {
				p := (i - 1) / 2
				if !before(h[p], h[i]) {
					break
				}
				h[p], h[i] = h[i], h[p]
				i = p
			}
			return
		}
		h[0] = c
		for i := 0; ; {
			c := 2*i + 1
			if c >= len(h) {
				break
			}
			if c+1 < len(h) && before(h[c], h[c+1]) {
				c++
			}
			if !before(h[i], h[c]) {
				break
			}
			h[i], h[c] = h[c], h[i]
			i = c
		}
	}
	rootV := float32(math.Inf(-1))
	for i, v := range logits {
		if len(h) == k {
			// Ids arrive in ascending order, so an equal logit loses to every kept one; NaN
			// fails the comparison and is dropped.
			if !(v > rootV) {
				continue
			}
		} else if v != v {
			continue
		}
		if s.count[i] != 0 {
			continue // penalised: considered below with its adjusted logit
		}
		push(cand{v, int32(i)})
		if len(h) == k {
			rootV = h[0].v
		}
	}
	for _, id := range s.penIDs {
		c := cand{s.adj[id], id}
		if c.v != c.v {
			continue
		}
		if len(h) < k || before(c, h[0]) {
			push(c)
		}
	}
	slices.SortFunc(h, cmpCand)
	s.cands = h
}

// finish turns sorted candidates into the sparse distribution: softmax at invT over the
// candidates, top-p (of the mass total when total > 0, else of the candidates' own mass, which
// is the top-k case), min-p, renormalise. Zero-weight candidates are dropped.
func (s *Sampler) finish(dst *Distribution, c []cand, invT float32, total float64) {
	dst.setSparse(len(c))
	if len(c) == 0 { // every logit NaN: nothing to rank, fall back to the lowest id
		dst.OneHot(0)
		return
	}
	m := c[0].v
	var mass float64
	prev := float32(1)
	for _, x := range c {
		// expNeg is accurate to ~1e-10 but not provably monotone across its table steps; the
		// clamp (at most one float32 ulp) keeps P non-increasing as a sparse Distribution
		// promises.
		w := min(weight(m, x.v, invT), prev)
		if !(w > 0) {
			break // sorted: every later candidate weighs 0 too
		}
		prev = w
		dst.IDs = append(dst.IDs, x.id)
		dst.P = append(dst.P, w)
		mass += float64(w)
	}
	if total <= 0 {
		total = mass
	}
	n := len(dst.P)
	if s.opt.topPActive() {
		goal := float64(s.opt.TopP) * total
		var cum float64
		for i, w := range dst.P {
			cum += float64(w)
			if cum >= goal {
				n = i + 1
				break
			}
		}
	}
	if s.opt.minPActive() {
		// P[0] is the largest weight, exactly 1, so the ratio to the top token is the weight.
		for i := 1; i < n; i++ {
			if dst.P[i] < s.opt.MinP {
				n = i
				break
			}
		}
	}
	n = max(n, 1)
	dst.IDs, dst.P = dst.IDs[:n], dst.P[:n]
	var sum float64
	for _, w := range dst.P {
		sum += float64(w)
	}
	inv := float32(1 / sum)
	for i := range dst.P {
		dst.P[i] *= inv
	}
}

// weight is exp((z - m) * invT) for the largest logit m, exactly 1 at the maximum (also when
// both are infinite) and 0 for NaN and for tokens beyond expCutoff.
func weight(m, z, invT float32) float32 {
	d := distance(m, z, invT)
	if !(d < expCutoff) {
		return 0
	}
	return expNeg(d)
}

// distance is the tempered logit gap (m - z) * invT: 0 at the maximum, +Inf or NaN (never
// below expCutoff) for -Inf and NaN logits.
func distance(m, z, invT float32) float32 {
	if z == m {
		return 0
	}
	return (m - z) * invT
}

const (
	log2e = 1.4426950408889634 // 1/ln 2
	ln2   = 0.6931471805599453
)

// expNeg is exp(-d) for d in [0, expCutoff), to float32 accuracy and several times faster
// than math.Exp (the full-vocabulary paths take one per token, 151,936 per row). With
// k = round(64 d / ln2) = 64n + j: exp(-d) = 2^-n * 2^(-j/64) * exp(-g), g = d - k ln2/64 in
// [-ln2/128, ln2/128]; 2^(-j/64) comes from a 64-entry table, exp(-g) from its Taylor
// polynomial to degree 3 (truncation below 0.0055^4/24 = 4e-11), and 2^-n from exponent bits
// (n <= 47, far from the float64 limits). The short chain of dependent multiplies is what
// makes it fast.
func expNeg(d float32) float32 {
	y := float64(d) * (64 * log2e)
	k := int(y + 0.5) // y >= 0, so truncation rounds to nearest
	g := (y - float64(k)) * (ln2 / 64)
	e := 1 - g*(1-g*(1.0/2-g*(1.0/6)))
	return float32(e * exp2Table[k&63] * math.Float64frombits(uint64(1023-k>>6)<<52))
}

// exp2Table[j] = 2^(-j/64).
var exp2Table = func() (t [64]float64) {
	for j := range t {
		t[j] = math.Exp2(-float64(j) / 64)
	}
	return t
}()

func maxLogit(z []float32) float32 {
	m := float32(math.Inf(-1))
	nan := true
	for _, v := range z {
		if v > m {
			m = v
		}
		if v == v {
			nan = false
		}
	}
	if nan {
		return float32(math.NaN())
	}
	return m
}

// prefilter handles top-p and/or min-p without top-k. Sorting the whole vocabulary per token
// would dominate, so candidates are collected first:
//   - min-p keeps weights >= min_p, a plain threshold on the logit.
//   - top-p keeps the shortest prefix of the sorted weights with mass >= top_p. One pass sums
//     the normaliser and a histogram of the mass by distance from the maximum (bins of 1/8);
//     the first bins whose cumulative mass reaches top_p * total hold a prefix of the sorted
//     order carrying enough mass, so they contain the exact top-p set. Only their tokens are
//     collected and sorted; finish then cuts the prefix exactly.
func (s *Sampler) prefilter(dst *Distribution, z []float32, invT float32) {
	m := maxLogit(z)
	if m != m { // every logit NaN: nothing to rank, fall back to the lowest id
		dst.OneHot(0)
		return
	}
	var total float64
	lastBin := nBins - 1
	if s.opt.topPActive() {
		clear(s.hist[:])
		for _, v := range z {
			d := distance(m, v, invT)
			if d < expCutoff {
				w := float64(expNeg(d))
				total += w
				s.hist[int(d*binsPerUnit)] += w
			}
		}
		goal := float64(s.opt.TopP) * total
		var cum float64
		for b, h := range s.hist {
			cum += h
			if cum >= goal {
				lastBin = b
				break
			}
		}
	}
	// The kept set is a prefix of the sorted order, so a plain logit threshold collects it:
	// every token of the chosen bins has distance below span = (lastBin+1)/8, and min-p keeps
	// distances up to -ln(min_p). The threshold is loosened by a relative 1e-5, far more than
	// float32 rounding of the distance, so the collected set is a superset (finish cuts it
	// exactly); one comparison per token, no exp.
	span := float64(lastBin+1) / binsPerUnit
	if minp := s.opt.MinP; minp > 0 {
		span = min(span, -math.Log(float64(minp)))
	}
	gap := span / float64(invT)
	t := float32(float64(m) - gap - (math.Abs(float64(m))+gap)*1e-5)
	c := s.cands[:0]
	for i, v := range z {
		if v >= t || v == m {
			c = append(c, cand{v, int32(i)})
		}
	}
	slices.SortFunc(c, cmpCand)
	s.cands = c
	s.finish(dst, c, invT, total)
}

// dense writes softmax(z * invT) over the whole vocabulary.
func (s *Sampler) dense(dst *Distribution, z []float32, invT float32) {
	dst.setDense(len(z))
	m := maxLogit(z)
	if m != m {
		clear(dst.P)
		dst.P[0] = 1
		return
	}
	var sum float64
	for i, v := range z {
		w := weight(m, v, invT)
		dst.P[i] = w
		sum += float64(w)
	}
	inv := float32(1 / sum)
	for i := range dst.P {
		dst.P[i] *= inv
	}
}

// Draw samples an id from d with Uniform(pos, why), walked through the cumulative probabilities
// (largest first when sparse, so the walk is short). Rounding that leaves the uniform above the
// total picks the last positive entry; -1 for an empty d.
func (s *Sampler) Draw(d *Distribution, pos int, why Purpose) int {
	u := s.Uniform(pos, why)
	var cum float64
	last := -1
	for i, p := range d.P {
		if p > 0 {
			cum += float64(p)
			last = i
			if u < cum {
				return d.ID(i)
			}
		}
	}
	if last < 0 {
		if len(d.P) == 0 {
			return -1
		}
		last = 0
	}
	return d.ID(last)
}

// Sample chooses the token after history (at position len(history)): the penalised argmax when
// greedy, else the Choose of Distribution (a DrawToken draw, or the race when coupled).
func (s *Sampler) Sample(logits []float32, history []int) int {
	if s.opt.Greedy() {
		if len(logits) == 0 {
			return -1
		}
		s.grow(len(logits))
		s.penalise(logits, history)
		id := s.argmax(logits)
		s.clearPenalties()
		return id
	}
	s.Distribution(&s.dist, logits, history)
	return s.Choose(&s.dist, len(history), DrawToken)
}
