package safetensors

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	nlp "github.com/nlpodyssey/safetensors"
)

// The nlpodyssey/safetensors package is an independent implementation of the format; it
// serves as an oracle in both directions for the dtypes it knows (it has no FP8).

var oracleDTypes = map[DType]nlp.DType{
	BOOL: nlp.BOOL, U8: nlp.U8, I8: nlp.I8, I16: nlp.I16, F16: nlp.F16, BF16: nlp.BF16,
	I32: nlp.I32, F32: nlp.F32, F64: nlp.F64, I64: nlp.I64,
}

func TestOracleReadsOurFiles(t *testing.T) {
	r := rand.New(rand.NewPCG(21, 22))
	var dts []DType
	for _, d := range allDTypes {
		if _, ok := oracleDTypes[d]; ok {
			dts = append(dts, d)
		}
	}
	ts := makeTensors(r, dts, "model.layers.")
	p := filepath.Join(t.TempDir(), "model.safetensors")
	meta := map[string]string{"format": "pt", "note": "<&>"}
	writeTensors(t, p, ts, meta)
	buf, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	st, err := nlp.Deserialize(buf)
	if err != nil {
		t.Fatalf("oracle rejects our file: %v", err)
	}
	if st.Len() != len(ts) {
		t.Fatalf("oracle sees %d tensors, want %d", st.Len(), len(ts))
	}
	for _, tt := range ts {
		v, ok := st.Tensor(tt.name)
		if !ok {
			t.Fatalf("oracle misses %s", tt.name)
		}
		if v.DType() != oracleDTypes[tt.dtype] || fmt.Sprint(v.Shape()) != fmt.Sprint(tt.shape) || !bytes.Equal(v.Data(), tt.data) {
			t.Fatalf("oracle disagrees on %s: %v %v", tt.name, v.DType(), v.Shape())
		}
	}
	_, md, err := nlp.ReadMetadata(buf)
	if err != nil || md.Metadata()["note"] != "<&>" || md.Metadata()["format"] != "pt" {
		t.Errorf("oracle metadata %v, %v", md.Metadata(), err)
	}
}

type oracleView struct {
	d     nlp.DType
	shape []uint64
	data  []byte
}

func (v oracleView) DType() nlp.DType { return v.d }
func (v oracleView) Shape() []uint64  { return v.shape }
func (v oracleView) Data() []byte     { return v.data }
func (v oracleView) DataLen() uint64  { return uint64(len(v.data)) }

func TestWeReadOracleFiles(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 24))
	var dts []DType
	for _, d := range allDTypes {
		if _, ok := oracleDTypes[d]; ok {
			dts = append(dts, d)
		}
	}
	ts := makeTensors(r, dts, "x.")
	views := map[string]oracleView{}
	for _, tt := range ts {
		shape := make([]uint64, len(tt.shape))
		for i, d := range tt.shape {
			shape[i] = uint64(d)
		}
		views[tt.name] = oracleView{oracleDTypes[tt.dtype], shape, tt.data}
	}
	buf, err := nlp.Serialize(views, map[string]string{"k": "v"})
	if err != nil {
		t.Fatal(err)
	}
	p := writeTemp(t, t.TempDir(), "o.safetensors", buf)
	m, err := Open(p)
	if err != nil {
		t.Fatalf("we reject the oracle's file: %v", err)
	}
	defer m.Close()
	checkTensors(t, m, ts)
	if m.FileMetadata()["k"] != "v" {
		t.Errorf("metadata %v", m.FileMetadata())
	}
}
