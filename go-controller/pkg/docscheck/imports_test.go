package docscheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

const (
	architectureDoc = "docs/architecture.md"
	modulePkg       = "github.com/kovs-net/kovs/go-controller/pkg/"
)

// TestArchitectureImportTableIsTrue: the package table of docs/architecture.md names
// every package under go-controller/pkg that has non-test code, and lists exactly the
// kovs packages each imports.
func TestArchitectureImportTableIsTrue(t *testing.T) {
	rows := importTable(t)
	if len(rows) == 0 {
		t.Fatalf("%s has no package table (| `pkg/...` | what | imports |)", architectureDoc)
	}
	pkgDir := filepath.Join(root, "go-controller", "pkg")
	err := filepath.WalkDir(pkgDir, func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(pkgDir, path)
		imports, ok := kovsImports(t, path)
		if !ok || rel == "." {
			return nil
		}
		name := "pkg/" + filepath.ToSlash(rel)
		documented, listed := rows[name]
		switch {
		case !listed:
			t.Errorf("%s: package %s is not in the package table; add a row `%s` with what it is and its imports %s",
				architectureDoc, name, name, imports)
		case !slices.Equal(documented, imports):
			t.Errorf("%s: %s imports %v, the table says %v", architectureDoc, name, imports, documented)
		}
		delete(rows, name)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for name := range rows {
		t.Errorf("%s: the package table lists %s, which has no non-test Go files", architectureDoc, name)
	}
}

// importTable reads the package table: package -> its kovs imports, sorted ("-": none).
func importTable(t *testing.T) map[string][]string {
	t.Helper()
	text, err := os.ReadFile(filepath.Join(root, architectureDoc))
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string][]string{}
	for _, line := range strings.Split(string(text), "\n") {
		cells := strings.Split(line, "|")
		if len(cells) != 5 || !strings.HasPrefix(strings.TrimSpace(cells[1]), "`pkg/") {
			continue
		}
		name := strings.Trim(strings.TrimSpace(cells[1]), "`")
		var imports []string
		for _, imp := range strings.Split(cells[3], ",") {
			if imp = strings.Trim(strings.TrimSpace(imp), "`"); imp != "" && imp != "-" {
				imports = append(imports, imp)
			}
		}
		slices.Sort(imports)
		rows[name] = imports
	}
	return rows
}

// kovsImports are the kovs packages (under go-controller/pkg, as paths under it) that the
// non-test Go files of dir import, sorted; ok is false when dir has no such file with a
// declaration (a package of tests, whose only other file is its doc.go).
func kovsImports(t *testing.T, dir string) (imports []string, ok bool) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(dir, e.Name()), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		ok = ok || len(f.Decls) > len(f.Imports) || slices.ContainsFunc(f.Decls, isNotImport)
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if rest, found := strings.CutPrefix(path, modulePkg); found && !slices.Contains(imports, rest) {
				imports = append(imports, rest)
			}
		}
	}
	slices.Sort(imports)
	return imports, ok
}

func isNotImport(d ast.Decl) bool {
	g, ok := d.(*ast.GenDecl)
	return !ok || g.Tok != token.IMPORT
}
