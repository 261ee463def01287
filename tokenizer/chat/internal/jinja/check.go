package jinja

// checkNames reports unknown filters and tests at compile time, except in
// "soft" positions (inside if statements and conditional expressions) where
// jinja2 3.x defers the error to run time. Softness follows jinja2's
// compiler frames: loop bodies, macros, call/filter/set blocks start a new,
// non-soft frame.
func checkNames(nodes []node, soft bool) {
	for _, n := range nodes {
		checkNode(n, soft)
	}
}

func checkNode(n node, soft bool) {
	switch nd := n.(type) {
	case *outputNode:
		for _, x := range nd.exprs {
			checkExpr(x, soft)
		}
	case *ifNode:
		for _, b := range nd.branches {
			checkExpr(b.cond, true)
			checkNames(b.body, true)
		}
		checkNames(nd.els, true)
	case *forNode:
		checkExpr(nd.iter, soft)
		checkExpr(nd.filter, false)
		checkNames(nd.body, false)
		checkNames(nd.els, false)
	case *setNode:
		checkExpr(nd.value, soft)
	case *setBlockNode:
		for _, f := range nd.filters {
			checkExpr(f, false)
		}
		checkNames(nd.body, false)
	case *macroNode:
		for _, p := range nd.params {
			checkExpr(p.def, false)
		}
		checkNames(nd.body, false)
	case *callBlockNode:
		checkExpr(nd.call, soft)
		for _, p := range nd.params {
			checkExpr(p.def, false)
		}
		checkNames(nd.body, false)
	case *filterBlockNode:
		for _, f := range nd.filters {
			checkExpr(f, false)
		}
		checkNames(nd.body, false)
	case *withNode:
		for _, v := range nd.values {
			checkExpr(v, soft)
		}
		checkNames(nd.body, false)
	case *scopeNode:
		checkNames(nd.body, false)
	}
}

func checkArgs(ca *callArgs, soft bool) {
	for _, a := range ca.args {
		checkExpr(a, soft)
	}
	for _, k := range ca.kwargs {
		checkExpr(k.val, soft)
	}
	checkExpr(ca.dynArgs, soft)
	checkExpr(ca.dynKwarg, soft)
}

func checkExpr(x expr, soft bool) {
	switch ex := x.(type) {
	case nil:
	case *listExpr:
		for _, it := range ex.items {
			checkExpr(it, soft)
		}
	case *dictExpr:
		for i := range ex.keys {
			checkExpr(ex.keys[i], soft)
			checkExpr(ex.vals[i], soft)
		}
	case *getattrExpr:
		checkExpr(ex.obj, soft)
	case *getitemExpr:
		checkExpr(ex.obj, soft)
		checkExpr(ex.arg, soft)
	case *sliceExpr:
		checkExpr(ex.start, soft)
		checkExpr(ex.stop, soft)
		checkExpr(ex.step, soft)
	case *callExpr:
		checkExpr(ex.fn, soft)
		checkArgs(&ex.callArgs, soft)
	case *filterExpr:
		if _, ok := filters[ex.name]; !ok && !soft {
			panic(parsePanic{&syntaxError{ex.line, "No filter named '" + ex.name + "'.", "TemplateAssertionError"}})
		}
		checkExpr(ex.obj, soft)
		checkArgs(&ex.callArgs, soft)
	case *testExpr:
		if _, ok := tests[ex.name]; !ok && !soft {
			panic(parsePanic{&syntaxError{ex.line, "No test named '" + ex.name + "'.", "TemplateAssertionError"}})
		}
		checkExpr(ex.obj, soft)
		checkArgs(&ex.callArgs, soft)
	case *notExpr:
		checkExpr(ex.x, soft)
	case *unaryExpr:
		checkExpr(ex.x, soft)
	case *binExpr:
		checkExpr(ex.l, soft)
		checkExpr(ex.r, soft)
	case *concatExpr:
		for _, p := range ex.parts {
			checkExpr(p, soft)
		}
	case *compareExpr:
		checkExpr(ex.first, soft)
		for _, o := range ex.ops {
			checkExpr(o.x, soft)
		}
	case *andExpr:
		checkExpr(ex.l, soft)
		checkExpr(ex.r, soft)
	case *orExpr:
		checkExpr(ex.l, soft)
		checkExpr(ex.r, soft)
	case *condExpr:
		checkExpr(ex.test, true)
		checkExpr(ex.yes, true)
		checkExpr(ex.no, true)
	}
}
