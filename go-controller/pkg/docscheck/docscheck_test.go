package docscheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/kovs-net/kovs/go-controller/pkg/cni/plugin"
)

// root is the repository root, from this package's directory.
const root = "../../.."

const configDoc = "docs/configuration.md"

// binaries whose flags configuration.md documents, each under a "## <name>" section.
var binaries = []string{"kovs-controller", "kovs-agent", "kovsctl", "kovs-ovs", "kovs-images"}

func TestEveryFlagIsDocumented(t *testing.T) {
	sections := docSections(t)
	for _, bin := range binaries {
		flags := flagsOf(t, filepath.Join(root, "go-controller/cmd", bin))
		if len(flags) == 0 {
			t.Errorf("%s: found no flag definitions: has the way flags are defined changed?", bin)
			continue
		}
		text, ok := sections[bin]
		if !ok {
			t.Errorf("%s has no \"## %s\" section", configDoc, bin)
			continue
		}
		missing := 0
		for _, f := range flags {
			if !strings.Contains(text, "`--"+f+"`") && !strings.Contains(text, "`-"+f+"`") {
				missing++
				t.Errorf("%s: flag --%s (defined in go-controller/cmd/%s) is not documented in the \"## %s\" section of %s as `--%s` (or `-%s`)",
					bin, f, bin, bin, configDoc, f, f)
			}
		}
		for _, f := range documentedFlags(text) {
			if !slices.Contains(flags, f) {
				t.Errorf("%s: %s documents `--%s` in a table, but go-controller/cmd/%s defines no such flag", bin, configDoc, f, bin)
			}
		}
		t.Logf("%s: %d flags, %d of them undocumented", bin, len(flags), missing)
	}
}

func TestEveryCNIConfigKeyIsDocumented(t *testing.T) {
	text, ok := docSections(t)["kovs-cni"]
	if !ok {
		t.Fatalf("%s has no \"## kovs-cni\" section", configDoc)
	}
	var keys []string
	typ := reflect.TypeOf(plugin.NetConf{})
	for i := 0; i < typ.NumField(); i++ {
		f := typ.Field(i)
		if f.Anonymous {
			continue // the standard CNI fields
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		keys = append(keys, name)
	}
	if len(keys) == 0 {
		t.Fatal("plugin.NetConf has no kovs keys: has it moved?")
	}
	for _, k := range keys {
		if !strings.Contains(text, "`"+k+"`") {
			t.Errorf("kovs-cni network config key %q is not documented in the \"## kovs-cni\" section of %s", k, configDoc)
		}
	}
}

func TestEveryConfigMapKeyIsDocumented(t *testing.T) {
	text, ok := docSections(t)["ConfigMap kovs-config"]
	if !ok {
		t.Fatalf("%s has no \"## ConfigMap kovs-config\" section", configDoc)
	}
	files, err := filepath.Glob(filepath.Join(root, "dist", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in dist/: %v", err)
	}
	n := 0
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(b), -1) {
			var obj struct {
				Kind     string
				Metadata struct{ Name string }
				Data     map[string]string
			}
			if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			if obj.Kind != "ConfigMap" {
				continue
			}
			for k := range obj.Data {
				n++
				if !strings.Contains(text, "`"+k+"`") {
					t.Errorf("key %q of ConfigMap %s (%s) is not documented in %s", k, obj.Metadata.Name, filepath.Base(file), configDoc)
				}
			}
		}
	}
	if n == 0 {
		t.Error("dist/ has no ConfigMap keys: has the ConfigMap moved?")
	}
}

// docSections splits configuration.md by its "## " headings.
func docSections(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, configDoc))
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string]string{}
	var name string
	for _, line := range strings.Split(string(b), "\n") {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			name = strings.Trim(strings.TrimSpace(h), "`")
			continue
		}
		if name != "" {
			sections[name] += line + "\n"
		}
	}
	return sections
}

// documentedFlags are the flags a section's tables list: rows that start with `--name`
// (or `-name`).
func documentedFlags(section string) []string {
	var out []string
	for _, m := range regexp.MustCompile("(?m)^\\| `--?([a-z0-9-]+)`").FindAllStringSubmatch(section, -1) {
		out = append(out, m[1])
	}
	return out
}

// flagDefiners are the flag package's functions and FlagSet methods that define a flag,
// with the index of the flag's name among their arguments.
var flagDefiners = map[string]int{
	"String": 0, "Int": 0, "Int64": 0, "Uint": 0, "Uint64": 0, "Bool": 0, "Duration": 0, "Float64": 0,
	"Func": 0, "BoolFunc": 0,
	"StringVar": 1, "IntVar": 1, "Int64Var": 1, "UintVar": 1, "Uint64Var": 1, "BoolVar": 1, "DurationVar": 1,
	"Float64Var": 1, "TextVar": 1, "Var": 1,
}

// flagsOf reads the flag names a command's sources define (flag.X or fs.X calls with a
// literal name, or a constant of the package). A name it cannot resolve fails the test, so
// a flag is never silently skipped.
func flagsOf(t *testing.T, dir string) []string {
	t.Helper()
	fset := token.NewFileSet()
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	consts := map[string]string{}
	var files []*ast.File
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, s := range g.Specs {
				vs := s.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if i < len(vs.Values) {
						if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
							consts[n.Name], _ = strconv.Unquote(lit.Value)
						}
					}
				}
			}
		}
	}
	seen := map[string]bool{}
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			idx, ok := flagDefiners[sel.Sel.Name]
			if !ok || len(call.Args) < 3 || len(call.Args) <= idx {
				return true
			}
			switch arg := call.Args[idx].(type) {
			case *ast.BasicLit:
				if arg.Kind == token.STRING {
					name, _ := strconv.Unquote(arg.Value)
					seen[name] = true
				}
			case *ast.Ident:
				name, ok := consts[arg.Name]
				if !ok {
					t.Errorf("%s: flag name %s is not a string constant of the package", fset.Position(arg.Pos()), arg.Name)
				}
				seen[name] = true
			default:
				t.Errorf("%s: cannot read the flag name of %s", fset.Position(call.Pos()), sel.Sel.Name)
			}
			return true
		})
	}
	var out []string
	for name := range seen {
		out = append(out, name)
	}
	sort.Strings(out)
	return out
}
