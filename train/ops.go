package train

import (
	"math"

	"github.com/dflash/dflash/kernel"
)

// chunk is the number of rows handed to one kernel product; the kernels are written for a few
// rows per call and split the panels across threads themselves.
const chunk = 32

// linear is a trainable bias-free map y = W x with W row-major [N][K] (Hugging Face layout). m and
// mt are kernel copies of W and W^T, rebuilt by refresh after every optimizer step (the kernel
// repacks its input, so updating W in place does not reach them).
type linear struct {
	W     []float32
	N, K  int
	m, mt *kernel.Matrix
}

func (l *linear) refresh() {
	l.m = kernel.NewF32(l.W, l.N, l.K)
	t := make([]float32, l.N*l.K)
	for j := 0; j < l.N; j++ {
		for i := 0; i < l.K; i++ {
			t[i*l.N+j] = l.W[j*l.K+i]
		}
	}
	l.mt = kernel.NewF32(t, l.K, l.N)
}

// matmul runs m over rows rows in chunks.
func matmul(m *kernel.Matrix, y, x []float32, rows int) {
	for r := 0; r < rows; r += chunk {
		n := min(chunk, rows-r)
		m.MatMul(y[r*m.N:(r+n)*m.N], x[r*m.K:(r+n)*m.K], n)
	}
}

// forward writes y[rows][N] = x[rows][K] W^T.
func (l *linear) forward(y, x []float32, rows int) { matmul(l.m, y, x, rows) }

// backward adds dY^T x to dW and, when dx is non-nil, writes dx = dY W.
func (l *linear) backward(dx, dW, dy, x []float32, rows int) {
	if dx != nil {
		matmul(l.mt, dx, dy, rows)
	}
	outerAdd(dW, dy, x, rows, l.N, l.K)
}

// outerAdd adds dy^T x to dW ([n][k]) over rows rows: row j of dW gains sum_r dy[r][j] x[r].
// One dW row stays in L1 while the x rows stream past, and each update is the kernel's SIMD
// axpy (about 4x a scalar loop at k = 64).
func outerAdd(dW, dy, x []float32, rows, n, k int) {
	for j := 0; j < n; j++ {
		w := dW[j*k : (j+1)*k]
		for r := 0; r < rows; r++ {
			if a := dy[r*n+j]; a != 0 {
				kernel.Axpy(w, a, x[r*k:(r+1)*k])
			}
		}
	}
}

// rmsInv is 1/sqrt(mean(x^2)+eps), the sum taken in float64 like nn.RMSNorm.
func rmsInv(x []float32, eps float32) float32 {
	var ss float64
	for _, v := range x {
		ss += float64(v) * float64(v)
	}
	return float32(1 / math.Sqrt(ss/float64(len(x))+float64(eps)))
}

// rmsForward normalises rows of width elements: y = x * inv(x) * w. It matches nn.RMSNorm.
func rmsForward(y, x, w []float32, rows, width int, eps float32) {
	for r := 0; r < rows; r++ {
		xr := x[r*width : (r+1)*width]
		yr := y[r*width : (r+1)*width]
		inv := rmsInv(xr, eps)
		for i, v := range xr {
			yr[i] = v * inv * w[i]
		}
	}
}

// rmsBackward adds to dx (not overwrites: residual streams share it) and dw the gradient of
// rmsForward. With g = dy*w and inv as forward: dx = inv*g - x * inv^3 * sum(g*x)/width.
func rmsBackward(dx, dw, dy, x, w []float32, rows, width int, eps float32) {
	for r := 0; r < rows; r++ {
		xr := x[r*width : (r+1)*width]
		dyr := dy[r*width : (r+1)*width]
		dxr := dx[r*width : (r+1)*width]
		inv := rmsInv(xr, eps)
		var dot float32
		for i, v := range xr {
			g := dyr[i] * w[i]
			dot += g * v
			dw[i] += dyr[i] * v * inv
		}
		c := inv * inv * inv * dot / float32(width)
		for i, v := range xr {
			dxr[i] += inv*dyr[i]*w[i] - c*v
		}
	}
}

// rope holds rotate-half tables (Hugging Face / Qwen3 convention, which DFlash drafts use) for
// positions [0, maxPos), computed in float64 and rounded once like nn.RoPE.
type rope struct {
	headDim  int
	cos, sin []float32
	maxPos   int
}

func newRope(headDim int, theta float64, maxPos int) *rope {
	h := headDim / 2
	r := &rope{headDim: headDim, cos: make([]float32, maxPos*h), sin: make([]float32, maxPos*h), maxPos: maxPos}
	for p := 0; p < maxPos; p++ {
		for i := 0; i < h; i++ {
			f := 1 / math.Pow(theta, float64(2*i)/float64(headDim))
			a := float64(p) * f
			r.cos[p*h+i] = float32(math.Cos(a))
			r.sin[p*h+i] = float32(math.Sin(a))
		}
	}
	return r
}

// apply rotates one row of heads head vectors in place at position pos; inverse rotates by
// -angle, which is the transpose and therefore the backward of the rotation.
func (r *rope) apply(x []float32, heads, pos int, inverse bool) {
	d := r.headDim
	h := d / 2
	cos := r.cos[pos*h : pos*h+h]
	sin := r.sin[pos*h : pos*h+h]
	for hd := 0; hd < heads; hd++ {
		v := x[hd*d : hd*d+d]
		for i := 0; i < h; i++ {
			a, b := v[i], v[i+h]
			c, s := cos[i], sin[i]
			if inverse {
				s = -s
			}
			v[i] = a*c - b*s
			v[i+h] = b*c + a*s
		}
	}
}

func sigmoid(x float32) float32 { return 1 / (1 + float32(math.Exp(float64(-x)))) }

// swigluForward writes act = silu(g) * u over n elements.
func swigluForward(act, g, u []float32) {
	for i, v := range g {
		act[i] = v * sigmoid(v) * u[i]
	}
}

// swigluBackward writes dg and du from dact.
func swigluBackward(dg, du, dact, g, u []float32) {
	for i, v := range g {
		s := sigmoid(v)
		silu := v * s
		du[i] = dact[i] * silu
		dg[i] = dact[i] * u[i] * s * (1 + v*(1-s))
	}
}

// softmaxCE turns logits (one row) into probabilities in place and returns -log p[target]
// (float64 for the running loss).
func softmaxCE(logits []float32, target int) float64 {
	m := logits[0]
	for _, v := range logits[1:] {
		if v > m {
			m = v
		}
	}
	var sum float64
	for i, v := range logits {
		e := math.Exp(float64(v - m))
		logits[i] = float32(e)
		sum += e
	}
	lt := float64(logits[target])
	inv := 1 / sum
	for i := range logits {
		logits[i] = float32(float64(logits[i]) * inv)
	}
	return -math.Log(lt * inv)
}

// argmax returns the first index of the largest value (ties go to the lowest id, as greedy
// decoding does).
func argmax(x []float32) int {
	best := 0
	for i, v := range x {
		if v > x[best] {
			best = i
		}
	}
	return best
}
