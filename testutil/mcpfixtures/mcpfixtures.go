// Package mcpfixtures holds the MCP conformance fixtures: the tools,
// prompts and resources that the server scenarios of the official MCP
// conformance suite (npm @modelcontextprotocol/conformance) call by name.
// They exist only to let that suite check the protocol handling of
// hearth's MCP door; they touch no sandbox. Only tests import this package
// (test/e2e's TestMCPConformance adds Extension to the door it serves), so
// the hearth binary never contains them, which test/arch checks.
package mcpfixtures

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hearth/hearth/mcpserver"
)

// Extension is the fixtures as an extension of the MCP door: it turns on
// completions and resource subscriptions, and adds the fixture tools,
// resources and prompts.
func Extension() mcpserver.Extension {
	return mcpserver.Extension{Configure: configure, Register: register}
}

// fixturePNG is a 1x1 PNG.
var fixturePNG, _ = base64.StdEncoding.DecodeString("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==")

// fixtureWAV is a WAV file of one silent 8-bit mono sample at 8 kHz.
var fixtureWAV = func() []byte {
	b := []byte("RIFF\x00\x00\x00\x00WAVEfmt ")
	b = binary.LittleEndian.AppendUint32(b, 16)   // fmt chunk size
	b = binary.LittleEndian.AppendUint16(b, 1)    // PCM
	b = binary.LittleEndian.AppendUint16(b, 1)    // mono
	b = binary.LittleEndian.AppendUint32(b, 8000) // sample rate
	b = binary.LittleEndian.AppendUint32(b, 8000) // byte rate
	b = binary.LittleEndian.AppendUint16(b, 1)    // block align
	b = binary.LittleEndian.AppendUint16(b, 8)    // bits per sample
	b = append(b, "data"...)
	b = binary.LittleEndian.AppendUint32(b, 1)
	b = append(b, 0x80)
	binary.LittleEndian.PutUint32(b[4:], uint32(len(b)-8))
	return b
}()

// configure sets the server options the fixtures need: completions and
// resource subscriptions.
func configure(o *mcp.ServerOptions) {
	o.CompletionHandler = func(_ context.Context, req *mcp.CompleteRequest) (*mcp.CompleteResult, error) {
		var values []string
		for _, v := range []string{"paris", "park", "party"} {
			if req.Params != nil && req.Params.Argument.Value != "" && !strings.HasPrefix(v, req.Params.Argument.Value) {
				continue
			}
			values = append(values, v)
		}
		if values == nil {
			values = []string{}
		}
		return &mcp.CompleteResult{Completion: mcp.CompletionResultDetails{Values: values, Total: len(values)}}, nil
	}
	o.SubscribeHandler = func(context.Context, *mcp.SubscribeRequest) error { return nil }
	o.UnsubscribeHandler = func(context.Context, *mcp.UnsubscribeRequest) error { return nil }
}

// noArgs is the input schema of a fixture tool without arguments.
var noArgs = json.RawMessage(`{"type":"object","properties":{}}`)

func textResult(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

// register adds the fixture tools, resources and prompts to srv.
func register(srv *mcp.Server) {
	addTools(srv)
	addResources(srv)
	addPrompts(srv)
}

// addTools adds the fixture tools, each named for the scenario that calls
// it.
func addTools(srv *mcp.Server) {
	tool := func(name, desc string, schema json.RawMessage, h mcp.ToolHandler) {
		srv.AddTool(&mcp.Tool{Name: name, Description: desc, InputSchema: schema}, h)
	}
	tool("test_simple_text", "Returns simple text content.", noArgs, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return textResult("This is a simple text response for testing."), nil
	})
	tool("test_image_content", "Returns image content.", noArgs, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.ImageContent{Data: fixturePNG, MIMEType: "image/png"}}}, nil
	})
	tool("test_audio_content", "Returns audio content.", noArgs, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.AudioContent{Data: fixtureWAV, MIMEType: "audio/wav"}}}, nil
	})
	tool("test_embedded_resource", "Returns an embedded resource.", noArgs, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{
			URI: "test://embedded-resource", MIMEType: "text/plain", Text: "This is an embedded resource content."}}}}, nil
	})
	tool("test_multiple_content_types", "Returns text, image and resource content.", noArgs, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{
			&mcp.TextContent{Text: "Multiple content types test:"},
			&mcp.ImageContent{Data: fixturePNG, MIMEType: "image/png"},
			&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: "test://mixed-content-resource", MIMEType: "application/json", Text: `{"test":"data","value":123}`}},
		}}, nil
	})
	tool("test_tool_with_logging", "Sends three log messages while it runs.", noArgs, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		for i, msg := range []string{"Tool execution started", "Tool processing data", "Tool execution completed"} {
			if i > 0 {
				time.Sleep(50 * time.Millisecond)
			}
			if err := req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: "info", Data: msg, Logger: "conformance"}); err != nil {
				return nil, err
			}
		}
		return textResult("Tool with logging executed successfully"), nil
	})
	tool("test_error_handling", "Always fails.", noArgs, func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "This tool intentionally returns an error for testing"}}}, nil
	})
	tool("test_tool_with_progress", "Reports progress 0, 50 and 100 of 100.", noArgs, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		token := req.Params.GetProgressToken()
		for i, p := range []float64{0, 50, 100} {
			if i > 0 {
				time.Sleep(50 * time.Millisecond)
			}
			if token == nil {
				continue
			}
			if err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: token, Progress: p, Total: 100}); err != nil {
				return nil, err
			}
		}
		return textResult("Tool with progress executed successfully"), nil
	})
	tool("test_sampling", "Asks the client's LLM to answer a prompt.",
		json.RawMessage(`{"type":"object","properties":{"prompt":{"type":"string","description":"The prompt to send to the LLM"}},"required":["prompt"]}`),
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var in struct{ Prompt string }
			if err := json.Unmarshal(req.Params.Arguments, &in); err != nil {
				return nil, err
			}
			res, err := req.Session.CreateMessage(ctx, &mcp.CreateMessageParams{
				Messages:  []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: in.Prompt}}},
				MaxTokens: 100,
			})
			if err != nil {
				return nil, err
			}
			text := ""
			if tc, ok := res.Content.(*mcp.TextContent); ok {
				text = tc.Text
			}
			return textResult("LLM response: " + text), nil
		})
	tool("test_elicitation", "Asks the user for a username and an email address.",
		json.RawMessage(`{"type":"object","properties":{"message":{"type":"string","description":"The message to show the user"}},"required":["message"]}`),
		func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var in struct{ Message string }
			if err := json.Unmarshal(req.Params.Arguments, &in); err != nil {
				return nil, err
			}
			return elicit(ctx, req, in.Message, `{"type":"object","properties":{
				"username":{"type":"string","description":"User's response"},
				"email":{"type":"string","description":"User's email address"}},
				"required":["username","email"]}`, "User response: ")
		})
	tool("test_elicitation_sep1034_defaults", "Elicits fields that all have defaults.", noArgs, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return elicit(ctx, req, "Test client default value handling - please accept with defaults", `{"type":"object","properties":{
			"name":{"type":"string","description":"User name","default":"John Doe"},
			"age":{"type":"integer","description":"User age","default":30},
			"score":{"type":"number","description":"User score","default":95.5},
			"status":{"type":"string","description":"User status","enum":["active","inactive","pending"],"default":"active"},
			"verified":{"type":"boolean","description":"Verification status","default":true}}}`, "Elicitation completed: ")
	})
	tool("test_elicitation_sep1330_enums", "Elicits the five kinds of enum.", noArgs, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return elicit(ctx, req, "Test enum schema variants", `{"type":"object","properties":{
			"untitledSingle":{"type":"string","enum":["option1","option2","option3"]},
			"titledSingle":{"type":"string","oneOf":[{"const":"value1","title":"First Option"},{"const":"value2","title":"Second Option"},{"const":"value3","title":"Third Option"}]},
			"legacyEnum":{"type":"string","enum":["opt1","opt2","opt3"],"enumNames":["Option One","Option Two","Option Three"]},
			"untitledMulti":{"type":"array","items":{"type":"string","enum":["option1","option2","option3"]}},
			"titledMulti":{"type":"array","items":{"anyOf":[{"const":"value1","title":"First Choice"},{"const":"value2","title":"Second Choice"},{"const":"value3","title":"Third Choice"}]}}}}`, "Elicitation completed: ")
	})
	tool("json_schema_2020_12_tool", "Tool with JSON Schema 2020-12 features", json.RawMessage(`{
		"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object",
		"$defs":{"address":{"type":"object","properties":{"street":{"type":"string"},"city":{"type":"string"}}}},
		"properties":{"name":{"type":"string"},"address":{"$ref":"#/$defs/address"}},
		"additionalProperties":false}`), func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return textResult("ok"), nil
	})
}

// addResources adds the fixture resources: static text and binary, one to
// subscribe to, and a template.
func addResources(srv *mcp.Server) {
	text := func(uri, mime, s string) *mcp.ReadResourceResult {
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, MIMEType: mime, Text: s}}}
	}
	srv.AddResource(&mcp.Resource{URI: "test://static-text", Name: "static-text", Description: "A static text resource.", MIMEType: "text/plain"},
		func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return text("test://static-text", "text/plain", "This is the content of the static text resource."), nil
		})
	srv.AddResource(&mcp.Resource{URI: "test://static-binary", Name: "static-binary", Description: "A static PNG.", MIMEType: "image/png"},
		func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: "test://static-binary", MIMEType: "image/png", Blob: fixturePNG}}}, nil
		})
	srv.AddResource(&mcp.Resource{URI: "test://watched-resource", Name: "watched-resource", Description: "A resource to subscribe to.", MIMEType: "text/plain"},
		func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return text("test://watched-resource", "text/plain", "Watched resource content."), nil
		})
	srv.AddResourceTemplate(&mcp.ResourceTemplate{URITemplate: "test://template/{id}/data", Name: "template", Description: "Data for an ID.", MIMEType: "application/json"},
		func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			id := strings.TrimSuffix(strings.TrimPrefix(req.Params.URI, "test://template/"), "/data")
			b, _ := json.Marshal(map[string]any{"id": id, "templateTest": true, "data": "Data for ID: " + id})
			return text(req.Params.URI, "application/json", string(b)), nil
		})
}

// addPrompts adds the fixture prompts: simple, with arguments, with an
// embedded resource, with an image.
func addPrompts(srv *mcp.Server) {
	prompt := func(p *mcp.Prompt, msgs func(args map[string]string) []*mcp.PromptMessage) {
		srv.AddPrompt(p, func(_ context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
			return &mcp.GetPromptResult{Messages: msgs(req.Params.Arguments)}, nil
		})
	}
	user := func(c mcp.Content) *mcp.PromptMessage { return &mcp.PromptMessage{Role: "user", Content: c} }
	prompt(&mcp.Prompt{Name: "test_simple_prompt", Description: "A simple prompt."}, func(map[string]string) []*mcp.PromptMessage {
		return []*mcp.PromptMessage{user(&mcp.TextContent{Text: "This is a simple prompt for testing."})}
	})
	prompt(&mcp.Prompt{Name: "test_prompt_with_arguments", Description: "A prompt with two arguments.", Arguments: []*mcp.PromptArgument{
		{Name: "arg1", Description: "First test argument", Required: true},
		{Name: "arg2", Description: "Second test argument", Required: true},
	}}, func(a map[string]string) []*mcp.PromptMessage {
		return []*mcp.PromptMessage{user(&mcp.TextContent{Text: fmt.Sprintf("Prompt with arguments: arg1='%s', arg2='%s'", a["arg1"], a["arg2"])})}
	})
	prompt(&mcp.Prompt{Name: "test_prompt_with_embedded_resource", Description: "A prompt that embeds a resource.", Arguments: []*mcp.PromptArgument{
		{Name: "resourceUri", Description: "URI of the resource to embed", Required: true},
	}}, func(a map[string]string) []*mcp.PromptMessage {
		return []*mcp.PromptMessage{
			user(&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: a["resourceUri"], MIMEType: "text/plain", Text: "Embedded resource content for testing."}}),
			user(&mcp.TextContent{Text: "Please process the embedded resource above."}),
		}
	})
	prompt(&mcp.Prompt{Name: "test_prompt_with_image", Description: "A prompt with an image."}, func(map[string]string) []*mcp.PromptMessage {
		return []*mcp.PromptMessage{
			user(&mcp.ImageContent{Data: fixturePNG, MIMEType: "image/png"}),
			user(&mcp.TextContent{Text: "Please analyze the image above."}),
		}
	})
}

// elicit asks the client to fill in schema and returns its answer as text
// after prefix.
func elicit(ctx context.Context, req *mcp.CallToolRequest, message, schema, prefix string) (*mcp.CallToolResult, error) {
	res, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Message: message, RequestedSchema: json.RawMessage(schema)})
	if err != nil {
		return nil, err
	}
	content, _ := json.Marshal(res.Content)
	return textResult(fmt.Sprintf("%saction=%s, content=%s", prefix, res.Action, content)), nil
}
