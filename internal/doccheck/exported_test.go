package doccheck

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"path"
	"sort"
	"strings"
	"testing"
)

// undocumented returns, for one parsed file, each exported name that
// lacks a doc comment, as "file:line: what". It looks at what go doc and
// pkg.go.dev show: exported types, functions, methods of exported types,
// constants and variables, the exported fields of exported structs and
// the methods of exported interfaces. A constant or variable is documented
// by its own comment or its group's; a field or an interface method by a
// comment above it or at the end of its line.
func undocumented(fset *token.FileSet, f *ast.File) []string {
	var out []string
	report := func(pos token.Pos, format string, args ...any) {
		p := fset.Position(pos)
		out = append(out, fmt.Sprintf("%s:%d: %s", p.Filename, p.Line, fmt.Sprintf(format, args...)))
	}
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			if !d.Name.IsExported() || d.Doc != nil {
				continue
			}
			if d.Recv == nil {
				report(d.Pos(), "func %s has no doc comment", d.Name.Name)
			} else if recv := receiverName(d.Recv); ast.IsExported(recv) {
				report(d.Pos(), "method %s.%s has no doc comment", recv, d.Name.Name)
			}
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				switch s := spec.(type) {
				case *ast.TypeSpec:
					if !s.Name.IsExported() {
						continue
					}
					if s.Doc == nil && s.Comment == nil && d.Doc == nil {
						report(s.Pos(), "type %s has no doc comment", s.Name.Name)
					}
					switch t := s.Type.(type) {
					case *ast.StructType:
						for _, field := range t.Fields.List {
							if name := exportedFieldName(field); name != "" && field.Doc == nil && field.Comment == nil {
								report(field.Pos(), "field %s.%s has no doc comment", s.Name.Name, name)
							}
						}
					case *ast.InterfaceType:
						for _, m := range t.Methods.List {
							if len(m.Names) == 1 && m.Names[0].IsExported() && m.Doc == nil && m.Comment == nil {
								report(m.Pos(), "method %s.%s has no doc comment", s.Name.Name, m.Names[0].Name)
							}
						}
					}
				case *ast.ValueSpec:
					if s.Doc != nil || s.Comment != nil || d.Doc != nil {
						continue
					}
					for _, n := range s.Names {
						if n.IsExported() {
							report(n.Pos(), "%s %s has no doc comment", d.Tok, n.Name)
							break
						}
					}
				}
			}
		}
	}
	return out
}

// receiverName returns the name of a method's receiver type, without a
// pointer or type parameters.
func receiverName(recv *ast.FieldList) string {
	if recv == nil || len(recv.List) == 0 {
		return ""
	}
	t := recv.List[0].Type
	for {
		switch x := t.(type) {
		case *ast.StarExpr:
			t = x.X
		case *ast.IndexExpr:
			t = x.X
		case *ast.IndexListExpr:
			t = x.X
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}

// exportedFieldName returns the first exported name a field declares (for
// an embedded field, its type's name), or "" if it declares none.
func exportedFieldName(field *ast.Field) string {
	if len(field.Names) == 0 {
		t := field.Type
		if s, ok := t.(*ast.StarExpr); ok {
			t = s.X
		}
		switch x := t.(type) {
		case *ast.Ident:
			if x.IsExported() {
				return x.Name
			}
		case *ast.SelectorExpr:
			if x.Sel.IsExported() {
				return x.Sel.Name
			}
		}
		return ""
	}
	for _, n := range field.Names {
		if n.IsExported() {
			return n.Name
		}
	}
	return ""
}

// Ensure that every exported name of the module's importable packages (not
// package main, not tests) has a doc comment, and so does every exported
// field of an exported struct: go doc and pkg.go.dev are the embedder's
// manual, and a field without a sentence leaves its units, zero value and
// meaning to a guess.
func TestExportedNamesAreDocumented(t *testing.T) {
	root := moduleRoot(t)
	fset := token.NewFileSet()
	var missing []string
	packages := 0
	seen := map[string]bool{}
	for _, rel := range moduleFiles(t, root, ".go") {
		if strings.HasSuffix(rel, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, rel, readFile(t, root, rel), parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		if f.Name.Name == "main" {
			continue
		}
		if dir := path.Dir(rel); !seen[dir] {
			seen[dir] = true
			packages++
		}
		missing = append(missing, undocumented(fset, f)...)
	}
	if packages < 10 {
		t.Fatalf("found %d packages; the walk of the module is broken", packages)
	}
	sort.Strings(missing)
	for _, m := range missing {
		t.Error(m)
	}
	if len(missing) > 0 {
		t.Errorf("%d exported names or fields without a doc comment", len(missing))
	}
}

// Ensure that the check itself finds each kind of undocumented name, and
// accepts each documented spelling, so that a passing run means something.
func TestUndocumentedFindsEachKind(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		want      []string
	}{
		{"documented", `package p
// T is documented.
type T struct {
	// A is documented above.
	A int
	B int // B is documented at the end of its line.
	c int
}
// I is documented.
type I interface {
	// M is documented.
	M()
}
// F is documented.
func F() {}
// M is documented.
func (T) M() {}
func (u) M() {}
type u struct{ X int }
// Group of constants.
const (
	C1 = 1
	C2 = 2
)
const D = 1 // D is documented at the end of its line.
`, nil},
		{"type", "package p\ntype T int\n", []string{"p.go:2: type T has no doc comment"}},
		{"func", "package p\nfunc F() {}\n", []string{"p.go:2: func F has no doc comment"}},
		{"method", "package p\n// T.\ntype T int\nfunc (t *T) M() {}\n", []string{"p.go:4: method T.M has no doc comment"}},
		{"generic method", "package p\n// T.\ntype T[X any] int\nfunc (t T[X]) M() {}\n", []string{"p.go:4: method T.M has no doc comment"}},
		{"const", "package p\nconst C = 1\n", []string{"p.go:2: const C has no doc comment"}},
		{"var in group", "package p\nvar (\n\tv = 1\n\tV = 2\n)\n", []string{"p.go:4: var V has no doc comment"}},
		{"field", "package p\n// T.\ntype T struct {\n\t// A.\n\tA int\n\tB, C string\n}\n", []string{"p.go:6: field T.B has no doc comment"}},
		{"embedded field", "package p\nimport \"io\"\n// T.\ntype T struct {\n\tio.Reader\n}\n", []string{"p.go:5: field T.Reader has no doc comment"}},
		{"interface method", "package p\n// I.\ntype I interface {\n\tM()\n}\n", []string{"p.go:4: method I.M has no doc comment"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, "p.go", tc.src, parser.ParseComments)
			if err != nil {
				t.Fatal(err)
			}
			got := undocumented(fset, f)
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
