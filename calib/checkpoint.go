package calib

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/tq-project/tq/internal/boundedread"
)

// CheckpointDir is the directory, inside the output directory, that holds an unfinished
// calibration: state.json, the two hidden-state files and one statistics file plus one result
// file per finished step (step 0 embeds the tokens, step i+1 runs block i, step n_layer+1 the
// output head). It is removed when calibration finishes.
const CheckpointDir = ".tq-calibrate"

const checkpointVersion = 1

// checkpointState is state.json.
type checkpointState struct {
	Version     int    `json:"version"`
	Fingerprint string `json:"fingerprint"`
	// StepsDone is the number of finished steps; Cur the hidden-state file (0/1) holding the
	// stream after the last finished step.
	StepsDone int `json:"steps_done"`
	Cur       int `json:"cur"`
	NSteps    int `json:"n_steps"`
}

// stepResult is step-NNNN.json: what a step produced besides its statistics.
type stepResult struct {
	Choices  map[string]*TensorChoice `json:"choices,omitempty"`
	Coverage *Coverage                `json:"coverage,omitempty"`
	// Uncovered counts experts given fallback statistics.
	Uncovered int      `json:"uncovered,omitempty"`
	Seconds   float64  `json:"seconds"`
	Warnings  []string `json:"warnings,omitempty"`
}

func stepStatsPath(dir string, step int) string {
	return filepath.Join(dir, fmt.Sprintf("step-%04d.stats.zst", step))
}

func stepResultPath(dir string, step int) string {
	return filepath.Join(dir, fmt.Sprintf("step-%04d.json", step))
}

func statePath(dir string) string { return filepath.Join(dir, "state.json") }

func saveJSON(path string, v any) error {
	return writeAtomic(path, func(w io.Writer) error {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	})
}

func loadJSON(path string, v any, limit int64) error {
	b, err := boundedread.ReadFile(path, "checkpoint file", limit)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// loadState reads the checkpoint state; ok is false when there is none.
func loadState(dir string) (*checkpointState, bool, error) {
	var st checkpointState
	err := loadJSON(statePath(dir), &st, 1<<20)
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("calib: checkpoint: %w", err)
	}
	if st.Version != checkpointVersion || st.StepsDone < 0 || st.StepsDone > st.NSteps || (st.Cur != 0 && st.Cur != 1) {
		return nil, false, fmt.Errorf("calib: checkpoint %s is not usable (version %d, step %d of %d): delete it to start over",
			statePath(dir), st.Version, st.StepsDone, st.NSteps)
	}
	return &st, true, nil
}
