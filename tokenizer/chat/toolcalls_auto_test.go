package chat

import (
	"reflect"
	"strings"
	"testing"
)

// TestParseToolCallsAuto: ToolCallsAuto picks the form per <tool_call> block, ignores bare
// <function=...> blocks and reports the same errors as the fixed formats.
func TestParseToolCallsAuto(t *testing.T) {
	text := "I will call two tools. <function=not_a_call>\n" +
		"<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": 1}}\n</tool_call>\n" +
		"<tool_call>\n<function=b>\n<parameter=city>\n007\n</parameter>\n<parameter=n>\n2\n</parameter>\n</function>\n</tool_call>\n" +
		"<tool_call>{\"name\": \"c\", \"arguments\": {</tool_call>" +
		"<tool_call>\n<function=d>\n<parameter=x>\n1\n</function>\n</tool_call>" +
		"<tool_call>{\"name\": \"e\""
	calls, err := ParseToolCalls(text, ToolCallsAuto)
	if len(calls) != 5 || err == nil {
		t.Fatalf("%d calls, err %v", len(calls), err)
	}
	if c := calls[0]; c.Err != nil || c.Name != "a" || string(c.Arguments) != `{"x":1}` || c.Params != nil ||
		!strings.HasPrefix(text[c.Start:], "<tool_call>\n{") {
		t.Errorf("JSON call: %+v", c)
	}
	want := []ToolCallParam{{"city", "007"}, {"n", "2"}}
	if c := calls[1]; c.Err != nil || c.Name != "b" || string(c.Arguments) != `{"city":"007","n":2}` || !reflect.DeepEqual(c.Params, want) {
		t.Errorf("XML call: %+v", c)
	}
	for i, msg := range map[int]string{2: "not valid JSON: unexpected EOF (invalid JSON at byte", 3: `parameter "x": missing </parameter>`, 4: "unterminated <tool_call>: missing </tool_call>"} {
		if calls[i].Err == nil || !strings.Contains(calls[i].Err.Error(), msg) {
			t.Errorf("call %d: error %v, want %q", i, calls[i].Err, msg)
		}
	}
	if ToolCallsAuto.String() != "auto" {
		t.Error(ToolCallsAuto.String())
	}
}

func TestXMLParamValue(t *testing.T) {
	for _, c := range []struct{ text, typ, want, err string }{
		{"007", "string", `"007"`, ""},
		{" 12 ", "integer", `12`, ""},
		{"1.5", "integer", "", "not a JSON integer"},
		{"True", "boolean", `true`, ""},
		{"yes", "boolean", "", "not a boolean"},
		{"None", "null", `null`, ""},
		{`{"a": [1, 2]}`, "object", `{"a":[1,2]}`, ""},
		{"[1]", "", `[1]`, ""},
		{"true", "", `"true"`, ""},
		{"two words", "", `"two words"`, ""},
	} {
		got, err := XMLParamValue(c.text, c.typ)
		if (err == nil) != (c.err == "") || (err != nil && !strings.Contains(err.Error(), c.err)) || string(got) != c.want {
			t.Errorf("XMLParamValue(%q, %q) = %s, %v; want %s, %q", c.text, c.typ, got, err, c.want, c.err)
		}
	}
}

// FuzzParseToolCallsAuto: no panics, ordered in-bounds spans, and every accepted call is a
// named JSON object whose XML parameters are recorded.
func FuzzParseToolCallsAuto(f *testing.F) {
	f.Add("<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call><tool_call><function=g><parameter=a>1</parameter></function></tool_call>")
	f.Add("<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</function>\n</tool_call>")
	f.Fuzz(func(t *testing.T, text string) {
		calls, _ := ParseToolCalls(text, ToolCallsAuto)
		prev := 0
		for _, c := range calls {
			if c.Start < prev || c.End < c.Start || c.End > len(text) || !strings.HasPrefix(text[c.Start:], "<tool_call>") {
				t.Fatalf("bad span %d..%d after %d in %d bytes", c.Start, c.End, prev, len(text))
			}
			prev = c.End
			if c.Err == nil && (c.Name == "" || len(c.Arguments) == 0 || c.Arguments[0] != '{') {
				t.Fatalf("accepted call %q with arguments %q", c.Name, c.Arguments)
			}
		}
	})
}
