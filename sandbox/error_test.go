package sandbox_test

import (
	"encoding/json"
	"testing"

	"github.com/hearth/hearth/sandbox"
)

// ParseErrorBody reads back what Body writes, keeps a code this build
// does not know, and refuses what is not an error body.
func TestParseErrorBody(t *testing.T) {
	sent := sandbox.Errorf(sandbox.CodeBudgetExceeded, "over by %d", 3).WithHint("sleep one").With("limit", 20)
	b, err := json.Marshal(sent.Body())
	if err != nil {
		t.Fatal(err)
	}
	got, ok := sandbox.ParseErrorBody(b)
	if !ok || got.Code != sandbox.CodeBudgetExceeded || got.Message != "over by 3" || got.Hint != "sleep one" || got.Details["limit"] != float64(20) {
		t.Errorf("ParseErrorBody(%s) = %+v, %v; want what was sent", b, got, ok)
	}
	if got, ok := sandbox.ParseErrorBody([]byte(`{"error":{"code":"from_the_future","message":"m"}}`)); !ok || got.Code != "from_the_future" || got.Code.Valid() {
		t.Errorf("an unknown code = %+v, %v; want it kept, not valid", got, ok)
	}
	for _, b := range []string{``, `<html>502</html>`, `{}`, `{"error":null}`, `{"error":{"code":"internal"}}`, `{"error":"text"}`} {
		if got, ok := sandbox.ParseErrorBody([]byte(b)); ok {
			t.Errorf("ParseErrorBody(%q) = %+v; want not an error body", b, got)
		}
	}
}
