package cachetrim

import (
	"bytes"
	"encoding/json"
	"errors"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// readerPackages are the packages whose code reads objects of the controller's shared
// informer factory (and, stricter than needed, every other package of the controller).
const readerPackages = "github.com/kovs-net/kovs/go-controller/pkg/controller/..."

// TestReadersSelectOnlyKeptFields type-checks the controller's packages and fails on any
// selection of a field of a trimmed type (Kept's keys) that Transform drops: a reader
// that starts reading a dropped field would see it always empty in production.
func TestReadersSelectOnlyKeptFields(t *testing.T) {
	if testing.Short() {
		t.Skip("type-checks the controller's packages")
	}
	pkgs := listPackages(t)
	kept := Kept()
	fset := token.NewFileSet()
	exports := map[string]string{}
	for _, p := range pkgs {
		exports[p.ImportPath] = p.Export
	}
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		if f, ok := exports[path]; ok && f != "" {
			return os.Open(f)
		}
		return nil, errors.New("no export data for " + path)
	})
	checked := 0
	for _, p := range pkgs {
		if p.DepOnly || strings.HasSuffix(p.ImportPath, "/cachetrim") {
			continue
		}
		var files []*ast.File
		for _, name := range p.GoFiles {
			f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, f)
		}
		info := &types.Info{Selections: map[*ast.SelectorExpr]*types.Selection{}}
		conf := types.Config{Importer: imp}
		if _, err := conf.Check(p.ImportPath, fset, files, info); err != nil {
			t.Fatalf("type-check %s: %v", p.ImportPath, err)
		}
		checked++
		for expr, sel := range info.Selections {
			if sel.Kind() != types.FieldVal {
				continue
			}
			owner := declaringStruct(sel)
			if fields, ok := kept[owner]; ok && !slices.Contains(fields, sel.Obj().Name()) {
				t.Errorf("%s: reads %s.%s, which cachetrim.Transform drops from the informers' cache: keep it (Kept and Transform)",
					fset.Position(expr.Pos()), owner, sel.Obj().Name())
			}
		}
	}
	if checked < 5 {
		t.Fatalf("checked %d packages: the package list is wrong", checked)
	}
}

// declaringStruct names the struct type that declares the selected field, following
// embedded fields (pod.Name is ObjectMeta's Name).
func declaringStruct(sel *types.Selection) string {
	typ := sel.Recv()
	idx := sel.Index()
	for _, i := range idx[:len(idx)-1] {
		typ = deref(typ).Underlying().(*types.Struct).Field(i).Type()
	}
	named, ok := deref(typ).(*types.Named)
	if !ok || named.Obj().Pkg() == nil {
		return ""
	}
	return keptKey(named.Obj().Pkg().Path(), named.Obj().Name())
}

func deref(t types.Type) types.Type {
	if p, ok := t.(*types.Pointer); ok {
		return p.Elem()
	}
	return t
}

type listedPackage struct {
	ImportPath, Dir, Export string
	GoFiles                 []string
	DepOnly                 bool
}

// listPackages runs go list for the reader packages and their dependencies, with export
// data to type-check against.
func listPackages(t *testing.T) []listedPackage {
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	out, err := exec.Command(gobin, "list", "-e", "-export", "-deps", "-json=ImportPath,Dir,Export,GoFiles,DepOnly",
		readerPackages).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list: %v: %s", err, ee.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	var pkgs []listedPackage
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		var p listedPackage
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}
