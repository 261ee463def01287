package verify

import (
	"fmt"
	"io"
	"time"

	"github.com/schollz/progressbar/v3"
)

// progress draws progress bars on w (nil: none) and prints status lines on log (nil: none).
type progress struct {
	w   io.Writer
	log io.Writer
}

// bar returns a callback advancing a bar of total steps labelled desc. The bar is finished
// (and cleared) when done reaches total.
func (p progress) bar(desc string) func(done, total int) {
	if p.w == nil {
		return nil
	}
	var b *progressbar.ProgressBar
	return func(done, total int) {
		if b == nil {
			b = progressbar.NewOptions(total, progressbar.OptionSetWriter(p.w), progressbar.OptionSetDescription(desc),
				progressbar.OptionShowCount(), progressbar.OptionSetPredictTime(true), progressbar.OptionClearOnFinish(),
				progressbar.OptionThrottle(100*time.Millisecond), progressbar.OptionSetWidth(30))
		}
		b.Set(done)
		if done >= total {
			b.Finish()
		}
	}
}

func (p progress) logf(format string, a ...any) {
	if p.log != nil {
		fmt.Fprintf(p.log, format+"\n", a...)
	}
}
