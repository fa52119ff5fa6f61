package policy_test

import (
	"strings"
	"testing"

	"github.com/hearth/hearth/policy"
	"github.com/hearth/hearth/sandbox"
)

// TestDestructiveDefaults: each default pattern catches its commands and
// leaves their harmless neighbours alone.
func TestDestructiveDefaults(t *testing.T) {
	l := policy.Defaults()
	for _, tc := range []struct {
		command string
		want    bool
	}{
		{"rm -rf build", true},
		{"rm -fr /tmp/x", true},
		{"rm -r dir", true},
		{"rm -R dir", true},
		{"rm --recursive dir", true},
		{"cd /srv && rm -v -rf data", true},
		{"RM -RF /", true},
		{"rm file.txt", false},
		{"rm -f file.txt", false},
		{"firm -r", false},
		{"git push --force origin main", true},
		{"git push -f", true},
		{"git push origin +main", true},
		{"git push --force-with-lease", true},
		{"git push origin main", false},
		{"git reset --hard HEAD~3", true},
		{"git clean -fdx", true},
		{"git reset --soft HEAD~1", false},
		{"psql -c 'DROP TABLE users'", true},
		{"echo 'drop database prod;' | mysql", true},
		{"drop schema public cascade", true},
		{"echo dropped tables", false},
		{"TRUNCATE orders", true},
		{"mkfs.ext4 /dev/sdb1", true},
		{"mkfs /dev/loop0", true},
		{"dd if=/dev/zero of=/dev/sda bs=1M", true},
		{"dd if=in.img | gzip", false},
		{"python manage.py migrate", true},
		{"rails db:migrate", true},
		{"alembic upgrade head", true},
		{"npx prisma migrate deploy", true},
		{"ls -la", false},
		{"python3 -c 'print(6*7)'", false},
	} {
		pattern, got := l.Destructive(tc.command)
		if got != tc.want || got && (pattern.Name == "" || pattern.Expr == "") {
			t.Errorf("Destructive(%q) = %+v, %v; want %v", tc.command, pattern, got, tc.want)
		}
	}
}

func TestDestructiveOverrides(t *testing.T) {
	only := []string{`\bdeploy\b`}
	l, err := policy.Defaults().With(sandbox.PolicyOverrides{DestructivePatterns: &only, GateOnFailure: ptrS(policy.GateAllow)})
	if err != nil || l.GateOnFailure != policy.GateAllow {
		t.Fatalf("With(patterns, allow) = %+v, %v", l, err)
	}
	if p, ok := l.Destructive("make deploy"); !ok || p != (policy.Pattern{Name: `\bdeploy\b`, Expr: `\bdeploy\b`}) {
		t.Errorf("Destructive(make deploy) = %q, %v; want the override", p, ok)
	}
	if _, ok := l.Destructive("rm -rf /"); ok {
		t.Errorf("Destructive(rm -rf /) with only the deploy pattern = true")
	}
	none := []string{}
	if off, err := policy.Defaults().With(sandbox.PolicyOverrides{DestructivePatterns: &none}); err != nil {
		t.Fatal(err)
	} else if _, ok := off.Destructive("rm -rf /"); ok {
		t.Errorf("an empty pattern list still gates rm -rf")
	}
	bad := []string{`ok`, `(unclosed`}
	_, err = policy.Defaults().With(sandbox.PolicyOverrides{DestructivePatterns: &bad})
	if e := sandbox.AsError(err); e == nil || e.Code != sandbox.CodeInvalidArgument || e.Hint == "" ||
		e.Message[:len("policy.destructive_patterns[1]")] != "policy.destructive_patterns[1]" {
		t.Errorf("With(a bad pattern) = %v, want invalid_argument naming policy.destructive_patterns[1]", err)
	}
	_, err = policy.Defaults().With(sandbox.PolicyOverrides{GateOnFailure: ptrS("maybe")})
	if e := sandbox.AsError(err); e == nil || e.Code != sandbox.CodeInvalidArgument {
		t.Errorf("With(gate_on_failure maybe) = %v, want invalid_argument", err)
	}
}

func TestCommandText(t *testing.T) {
	if got := policy.CommandText(sandbox.ExecRequest{Argv: []string{"rm", "-rf", "x"}}); got != "rm -rf x" {
		t.Errorf("CommandText(argv) = %q", got)
	}
	if got := policy.CommandText(sandbox.ExecRequest{Shell: "echo a; rm -r b"}); got != "echo a; rm -r b" {
		t.Errorf("CommandText(shell) = %q", got)
	}
}

func ptrS(s string) *string { return &s }

// TestMatcherAgreesWithDestructive: the streamed matcher says what
// Destructive says of the whole text, whatever the pieces, also when the
// match straddles them or lies far into a long script.
func TestMatcherAgreesWithDestructive(t *testing.T) {
	l := policy.Defaults()
	long := strings.Repeat("# a comment line of a long generated script\n", 5_000) // ≈220 KB
	for _, text := range []string{
		"rm -rf build", "ls -la", "echo ok\ngit push --force origin main\n", "",
		long + "rm -r dir\n", long + "echo done\n", "DROP\nTABLE users",
	} {
		want, wantOK := l.Destructive(text)
		pieces := []int{1, 3, 4096, len(text) + 1}
		if len(text) > 1000 {
			pieces = pieces[2:] // one-byte pieces of a long text take long
		}
		for _, piece := range pieces {
			m := l.Matcher()
			for rest := text; len(rest) > 0; {
				n := min(piece, len(rest))
				m.Write([]byte(rest[:n]))
				rest = rest[n:]
			}
			got, ok := m.Close()
			if ok != wantOK || got != want {
				t.Errorf("Matcher over %d-byte pieces of %.40q = %+v, %v; want %+v, %v", piece, text, got, ok, want, wantOK)
			}
		}
	}
}
