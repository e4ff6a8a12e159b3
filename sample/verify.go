package sample

// Accept decides one speculative draft token per DFLASH.md section 1: tok, drawn by the draft
// from its proposal q, is accepted with probability min(1, p(tok)/q(tok)) under the target's p.
// It always consumes exactly one Uniform, so a fixed seed replays a whole verification. With
// u < 1, p(tok) >= q(tok) always accepts and p(tok) = 0 never does; q(tok) = 0 (a token the
// proposal could not have drawn) accepts whenever p(tok) > 0.
//
// At temperature 0 both distributions are one-hot and this reduces to tok == argmax p.
func (s *Sampler) Accept(p, q *Distribution, tok int) bool {
	u := s.Uniform()
	return u*float64(q.Prob(tok)) < float64(p.Prob(tok))
}

// Resample draws the token emitted at the first rejected draft: from Residual(p, q), or from p
// when the residual is zero. Together with Accept it makes the emitted token distributed
// exactly as p. It reuses the sampler's scratch, so the runner need not hold one.
func (s *Sampler) Resample(p, q *Distribution) int {
	if Residual(&s.resid, p, q) {
		return s.Draw(&s.resid)
	}
	return s.Draw(p)
}
