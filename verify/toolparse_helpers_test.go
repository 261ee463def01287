package verify

// parseCall parses the body of one <tool_call> block (the tests' shorthand for a turn holding
// just that block).
func parseCall(body string) ParsedCall {
	t := parseTurn(toolCallOpen+body+toolCallClose, false)
	if len(t.Calls) != 1 {
		return ParsedCall{Raw: body, Err: "not exactly one <tool_call> block"}
	}
	return t.Calls[0]
}
