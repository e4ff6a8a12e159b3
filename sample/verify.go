package sample

// Accept decides one speculative draft token per DFLASH.md section 1: tok, drawn by the draft
// from its proposal q, is accepted with probability min(1, p(tok)/q(tok)) under the target's p.
// Its uniform is Uniform(pos, DrawAccept), pos being the draft's position, so a fixed seed
// replays a whole verification. With u < 1, p(tok) >= q(tok) always accepts and p(tok) = 0 never does; q(tok) = 0 (a token the
// proposal could not have drawn) accepts whenever p(tok) > 0.
//
// At temperature 0 both distributions are one-hot and this reduces to tok == argmax p.
func (s *Sampler) Accept(p, q *Distribution, tok, pos int) bool {
	u := s.Uniform(pos, DrawAccept)
	return u*float64(q.Prob(tok)) < float64(p.Prob(tok))
}

// Resample draws the token emitted at the first rejected draft: from Residual(p, q), or from p
// when the residual is zero. Together with Accept it makes the emitted token distributed
// exactly as p. pos is the rejected draft's position (the draw is DrawResidual there). It reuses
// the sampler's scratch, so the runner need not hold one.
func (s *Sampler) Resample(p, q *Distribution, pos int) int {
	if Residual(&s.resid, p, q) {
		return s.Draw(&s.resid, pos, DrawResidual)
	}
	return s.Draw(p, pos, DrawResidual)
}
