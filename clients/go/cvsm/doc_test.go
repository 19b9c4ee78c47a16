package cvsm

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestExportedItemsHaveGodoc checks that every exported item of the package
// has a doc comment in godoc's voice: one that starts with the item's name
// (a grouped constant or variable may share its group's comment instead).
func TestExportedItemsHaveGodoc(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, path, src, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		check := func(name string, doc *ast.CommentGroup, pos token.Pos) {
			if !ast.IsExported(name) {
				return
			}
			text := doc.Text()
			if text == "" {
				t.Errorf("%s: %s has no doc comment", fset.Position(pos), name)
				return
			}
			first := strings.Fields(text)[0]
			if first != name && first != "A" && first != "An" && first != "The" {
				t.Errorf("%s: the doc comment of %s starts with %q, not its name", fset.Position(pos), name, first)
			}
		}
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if d.Recv != nil && !exportedReceiver(d.Recv) {
					continue
				}
				check(d.Name.Name, d.Doc, d.Pos())
			case *ast.GenDecl:
				for _, spec := range d.Specs {
					switch s := spec.(type) {
					case *ast.TypeSpec:
						doc := s.Doc
						if doc == nil && len(d.Specs) == 1 {
							doc = d.Doc
						}
						check(s.Name.Name, doc, s.Pos())
						if st, ok := s.Type.(*ast.StructType); ok && ast.IsExported(s.Name.Name) {
							for _, field := range st.Fields.List {
								for _, n := range field.Names {
									if ast.IsExported(n.Name) && field.Doc == nil && field.Comment == nil {
										t.Errorf("%s: field %s.%s has no comment", fset.Position(n.Pos()), s.Name.Name, n.Name)
									}
								}
							}
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if !ast.IsExported(n.Name) {
								continue
							}
							if s.Doc == nil && s.Comment == nil && (d.Doc == nil || !d.Lparen.IsValid()) {
								check(n.Name, d.Doc, n.Pos())
							} else if s.Doc != nil {
								check(n.Name, s.Doc, n.Pos())
							}
						}
					}
				}
			}
		}
	}
}

// exportedReceiver tells whether a method's receiver type is exported.
func exportedReceiver(recv *ast.FieldList) bool {
	expr := recv.List[0].Type
	if star, ok := expr.(*ast.StarExpr); ok {
		expr = star.X
	}
	if idx, ok := expr.(*ast.IndexExpr); ok {
		expr = idx.X
	}
	id, ok := expr.(*ast.Ident)
	return ok && ast.IsExported(id.Name)
}
