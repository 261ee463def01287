// Command gendata writes the training examples of the tool-calling test model
// (testdata/verify/toolmodel, trained by testdata/verify/toolmodel/train.py): every case of
// verify's built-in tool-call suite rendered with the model's chat template exactly as
// `tq verify` renders it, tokenized with the model's tokenizer, and the assistant turn the model
// must learn (a reasoning block for the thinking cases, then the tool call, then <|im_end|>).
//
//	go run ./verify/internal/toolmodel/gendata -model testdata/verify/toolmodel -out /tmp/toolmodel-data.json
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"github.com/tq-project/tq/tokenizer"
	"github.com/tq-project/tq/tokenizer/chat"
	"github.com/tq-project/tq/verify"
)

// completions are the assistant turns for the built-in suite's cases.
var completions = map[string]string{
	"weather":      `{"name": "get_weather", "arguments": {"city": "Lisbon"}}`,
	"weather-unit": `{"name": "get_weather", "arguments": {"city": "Oslo", "unit": "fahrenheit"}}`,
	"search":       `{"name": "search_web", "arguments": {"query": "tidal power plants", "max_results": 3}}`,
	"email":        `{"name": "send_email", "arguments": {"to": "maria@example.com", "subject": "Lunch", "body": "I'll be ten minutes late."}}`,
	"event": `{"name": "create_event", "arguments": {"title": "Design review", "date": "2025-03-12", "time": "14:30", ` +
		`"duration_minutes": 45, "attendees": ["Ana", "Tom"]}}`,
	"currency":        `{"name": "convert_currency", "arguments": {"amount": 250, "from_currency": "EUR", "to_currency": "JPY"}}`,
	"timer":           `{"name": "set_timer", "arguments": {"minutes": 12, "label": "pasta"}}`,
	"translate":       `{"name": "translate_text", "arguments": {"text": "Where is the train station?", "target_language": "German"}}`,
	"calculate-think": `{"name": "calculate", "arguments": {"expression": "1234 * 5678"}}`,
	"stock-think":     `{"name": "get_stock_price", "arguments": {"symbol": "ACME"}}`,
	"booking":         `{"name": "book_table", "arguments": {"restaurant": "Casa Azul", "date": "2025-04-02", "time": "19:30", "party_size": 4}}`,
	"followup":        `{"name": "send_email", "arguments": {"to": "joao@example.com", "subject": "Porto weather", "body": "Porto: 18 °C and light rain."}}`,
}

var thoughts = map[string]string{
	"calculate-think": "The user wants an exact product, so I will use the calculator.",
	"stock-think":     "I need the latest trading price for the ticker ACME.",
}

type example struct {
	ID         string  `json:"id"`
	Prompt     []int32 `json:"prompt"`
	Completion []int32 `json:"completion"`
}

func main() {
	model := flag.String("model", "testdata/verify/toolmodel", "HF model folder (tokenizer and chat template)")
	out := flag.String("out", "", "output JSON file")
	flag.Parse()
	if *out == "" {
		fmt.Fprintln(os.Stderr, "gendata: -out is required")
		os.Exit(2)
	}
	if err := run(*model, *out); err != nil {
		fmt.Fprintln(os.Stderr, "gendata:", err)
		os.Exit(1)
	}
}

func run(model, out string) error {
	tok, err := tokenizer.LoadHF(model)
	if err != nil {
		return err
	}
	imEnd, ok := tok.TokenID("<|im_end|>")
	if !ok {
		return fmt.Errorf("%s: no <|im_end|> token", model)
	}
	suite, err := verify.LoadSuite("")
	if err != nil {
		return err
	}
	var exs []example
	for _, c := range suite.Cases {
		call, ok := completions[c.ID]
		if !ok {
			return fmt.Errorf("no completion for suite case %q", c.ID)
		}
		bos := ""
		if id := tok.BOS(); id >= 0 {
			bos = tok.TokenPiece(id)
		}
		eos := ""
		if id := tok.EOS(); id >= 0 {
			eos = tok.TokenPiece(id)
		}
		prompt, err := chat.Render(tok.ChatTemplate(), c.Messages, chat.Options{ToolsJSON: c.Tools,
			AddGenerationPrompt: c.AddGenerationPrompt, EnableThinking: c.EnableThinking, BOS: bos, EOS: eos})
		if err != nil {
			return fmt.Errorf("case %s: %w", c.ID, err)
		}
		text := "<tool_call>\n" + call + "\n</tool_call>"
		if th, ok := thoughts[c.ID]; ok {
			text = "<think>\n" + th + "\n</think>\n\n" + text
		}
		p := tok.Encode(prompt, tokenizer.EncodeOptions{AddSpecial: true, ParseSpecial: true})
		comp := append(tok.Encode(text, tokenizer.EncodeOptions{ParseSpecial: true}), imEnd)
		exs = append(exs, example{ID: c.ID, Prompt: p, Completion: comp})
	}
	b, err := json.Marshal(map[string]any{"examples": exs})
	if err != nil {
		return err
	}
	return os.WriteFile(out, b, 0o644)
}
