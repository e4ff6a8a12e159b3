package server

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are registered on a per-Server registry so several servers (tests) can coexist.
type metrics struct {
	reg          *prometheus.Registry
	requests     *prometheus.CounterVec   // endpoint, status
	duration     *prometheus.HistogramVec // endpoint
	genTokens    *prometheus.CounterVec   // model
	promptTokens *prometheus.CounterVec   // model
	reusedTokens *prometheus.CounterVec   // model
	tau          *prometheus.HistogramVec // model
	tpot         *prometheus.HistogramVec // model
	loadSeconds  *prometheus.HistogramVec // model
	loadFailures *prometheus.CounterVec   // model
	queueDepth   prometheus.Gauge
	running      prometheus.Gauge
	batchWidth   *prometheus.GaugeVec     // model: the latest decode step's width
	batchSteps   *prometheus.HistogramVec // model: every decode step's width
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dflash_http_requests_total", Help: "HTTP requests by endpoint and status code.",
		}, []string{"endpoint", "status"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "dflash_http_request_duration_seconds", Help: "HTTP request duration by endpoint.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}, []string{"endpoint"}),
		genTokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dflash_generated_tokens_total", Help: "Tokens generated.",
		}, []string{"model"}),
		promptTokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dflash_prompt_tokens_total", Help: "Prompt tokens evaluated.",
		}, []string{"model"}),
		reusedTokens: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dflash_prompt_reused_tokens_total", Help: "Prompt tokens whose cached rows were reused (prefix reuse, a hybrid target's checkpoints included) instead of evaluated.",
		}, []string{"model"}),
		tau: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "dflash_speculation_tau", Help: "Mean tokens committed per verification round, per generation.",
			Buckets: []float64{1, 1.5, 2, 2.5, 3, 3.5, 4, 5, 6, 8, 10, 12, 16},
		}, []string{"model"}),
		tpot: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "dflash_time_per_output_token_seconds", Help: "Decode time per generated token, per generation.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}, []string{"model"}),
		loadSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "dflash_model_load_duration_seconds", Help: "Model load time.",
			Buckets: prometheus.ExponentialBuckets(0.01, 3, 10),
		}, []string{"model"}),
		loadFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dflash_model_load_failures_total", Help: "Failed model loads.",
		}, []string{"model"}),
		queueDepth: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "dflash_queue_depth", Help: "Requests waiting for a generation slot.",
		}),
		running: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "dflash_running_generations", Help: "Generations holding a slot.",
		}),
		batchWidth: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "dflash_batch_width", Help: "Generations the latest decode step of the model ran together.",
		}, []string{"model"}),
		batchSteps: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "dflash_batch_step_width", Help: "Generations each decode step of the model ran together.",
			Buckets: []float64{1, 2, 3, 4, 6, 8, 12, 16, 32},
		}, []string{"model"}),
	}
	m.reg.MustRegister(m.requests, m.duration, m.genTokens, m.promptTokens, m.reusedTokens, m.tau, m.tpot,
		m.loadSeconds, m.loadFailures, m.queueDepth, m.running, m.batchWidth, m.batchSteps,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *metrics) observeGeneration(model string, res GenResult) {
	m.genTokens.WithLabelValues(model).Add(float64(res.EvalTokens))
	m.promptTokens.WithLabelValues(model).Add(float64(res.PromptTokens))
	m.reusedTokens.WithLabelValues(model).Add(float64(res.ReusedTokens))
	if res.EvalTokens > 0 && res.EvalDuration > 0 {
		m.tpot.WithLabelValues(model).Observe(res.EvalDuration.Seconds() / float64(res.EvalTokens))
	}
	if res.Speculation != nil && res.Speculation.Rounds > 0 {
		m.tau.WithLabelValues(model).Observe(res.Speculation.Tau)
	}
}

// stepObserver is what a model reports its decode steps' widths to (StepObserver).
func (m *metrics) stepObserver(model string) func(int) {
	g, h := m.batchWidth.WithLabelValues(model), m.batchSteps.WithLabelValues(model)
	return func(w int) {
		g.Set(float64(w))
		h.Observe(float64(w))
	}
}
