package main

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	goferconfig "gvisor.dev/gvisor/runsc/fsgofer/filter/config"
)

// probe is a program built against the prepared copy of gVisor: it
// registers the gofer's precompiled programs and prints them, with how much
// the registration grew the heap.
const probe = `package main

import (
	"encoding/json"
	"os"
	"runtime"

	"gvisor.dev/gvisor/runsc/fsgofer/filter"
	"gvisor.dev/gvisor/pkg/seccomp/precompiledseccomp"
)

func main() {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	names := filter.ListPrecompiled()
	runtime.GC()
	runtime.ReadMemStats(&after)
	out := struct {
		Disabled bool
		HeapGrowth int64
		Programs map[string]precompiledseccomp.Program
	}{filter.PrecompilationDisabledAtBuildTime, int64(after.HeapAlloc) - int64(before.HeapAlloc), map[string]precompiledseccomp.Program{}}
	for _, n := range names {
		p, ok := filter.GetPrecompiled(n)
		if !ok {
			panic(n)
		}
		out.Programs[n] = p
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		panic(err)
	}
}
`

// TestPrepare builds a program against the copy of gVisor that prepare
// fills, and checks what the gofer's filter package serves there: every
// program gVisor precompiles for it, each byte of its bytecode and its
// variables' offsets as gVisor computed them, precompilation marked done,
// and registration that leaves the bytecode out of the heap (gVisor's own
// rendering copies all of it there).
func TestPrepare(t *testing.T) {
	if testing.Short() {
		t.Skip("copies gVisor's module and compiles its filter packages")
	}
	build, err := prepare(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(build, "main.go"), []byte(probe), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := goIn(build, "run", ".")
	cmd.Stderr = os.Stderr
	raw, err := cmd.Output()
	if err != nil {
		t.Fatalf("the probe against the prepared copy: %v", err)
	}
	var got struct {
		Disabled   bool
		HeapGrowth int64
		Programs   map[string]goferProgram
	}
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatalf("the probe's output: %v", err)
	}
	want, err := goferconfig.PrecompiledPrograms()
	if err != nil {
		t.Fatal(err)
	}
	if got.Disabled {
		t.Error("PrecompilationDisabledAtBuildTime is still true")
	}
	if len(got.Programs) != len(want) {
		t.Errorf("%d programs registered, want %d", len(got.Programs), len(want))
	}
	bytes := 0
	for _, w := range want {
		bytes += 4 * len(w.Bytecode32)
		g, ok := got.Programs[w.Name]
		if !ok {
			t.Errorf("program %q is not registered", w.Name)
			continue
		}
		if !slices.Equal(g.Bytecode32, w.Bytecode32) {
			t.Errorf("program %q: registered bytecode differs from gVisor's (%d and %d words)", w.Name, len(g.Bytecode32), len(w.Bytecode32))
		}
		if !maps.EqualFunc(g.VarOffsets, w.VarOffsets, slices.Equal) {
			t.Errorf("program %q: variables at %v, want %v", w.Name, g.VarOffsets, w.VarOffsets)
		}
	}
	if got.HeapGrowth > int64(bytes/2) {
		t.Errorf("registering %d bytes of bytecode grew the heap by %d bytes: the bytecode was copied there", bytes, got.HeapGrowth)
	}
	t.Logf("%d programs, %d bytes of bytecode; registration grew the heap by %d bytes", len(want), bytes, got.HeapGrowth)
}

// goferProgram is precompiledseccomp.Program as the probe encodes it.
type goferProgram struct {
	Bytecode32 []uint32
	VarOffsets map[string][]int
}
