package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/tq-project/tq/internal/convert"
)

// writeTypeMix prints the types a converted file is made of: tensors, weights, bytes and bits
// per weight of each (general.file_type names only one of them).
func writeTypeMix(w io.Writer, mix []convert.TypeMix) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "  type\ttensors\tweights\tsize\tbpw\t\n")
	for _, m := range mix {
		fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\t%.3f\t\n", m.Type, m.Tensors, humanCount(uint64(m.Elements)), fmtBytes(m.Bytes), m.BPW)
	}
	return tw.Flush()
}
