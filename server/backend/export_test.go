package backend

// Test hooks into a loaded model's runner.Batcher: a test that must know its steps' width pauses
// them, starts its generations, waits for Running, and resumes.

func PauseSteps(m *Model)  { m.batcher.Pause() }
func ResumeSteps(m *Model) { m.batcher.Resume() }
func Running(m *Model) int { return m.batcher.Width() }

// Queued is the units of m's run semaphore in use and the requests waiting for some.
func Queued(m *Model) (used, waiting int) { return m.run.state() }
