// Package splitmix is SplitMix64, the one small deterministic generator dflash uses where numbers
// need only be reproducible and well mixed: random test and synthetic weights, an oracle draft's
// noise, and the hash package sample keys a sampler's draws with (seed, position, purpose). It is
// never for anything that must be unpredictable.
package splitmix

// gamma is SplitMix64's increment, the odd integer closest to 2^64 / phi.
const gamma = 0x9e3779b97f4a7c15

// Mix is SplitMix64's output for the state x advanced by one step: a bijective, well-mixed hash
// of x. Iterating it (x = Mix(x)) gives a fast stream that depends only on the start.
func Mix(x uint64) uint64 {
	z := x + gamma
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// Stream is a SplitMix64 generator; its zero value starts at state 0.
type Stream struct{ State uint64 }

// Next advances the state by one step and returns its output.
func (s *Stream) Next() uint64 {
	z := Mix(s.State)
	s.State += gamma
	return z
}

// Float64 is a uniform draw in [0, 1) with 53 random bits.
func (s *Stream) Float64() float64 { return float64(s.Next()>>11) / (1 << 53) }
