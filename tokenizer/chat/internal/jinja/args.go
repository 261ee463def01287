package jinja

import "fmt"

// requiredArg marks a parameter without a default.
type requiredArg struct{}

var reqd = requiredArg{}

type param struct {
	name string
	def  Value
}

func p(name string, def Value) param { return param{name, def} }

// bind maps positional and keyword arguments onto a Python-style signature.
func bind(fname string, args []Value, kw *kwargs, params ...param) ([]Value, error) {
	if len(args) > len(params) {
		return nil, typeErr(fmt.Sprintf("%s() takes at most %d arguments (%d given)", fname, len(params), len(args)))
	}
	out := make([]Value, len(params))
	copy(out, args)
	for i := len(args); i < len(params); i++ {
		if v, ok := kw.get(params[i].name); ok {
			out[i] = v
			continue
		}
		if _, isReq := params[i].def.(requiredArg); isReq {
			return nil, typeErr(fmt.Sprintf("%s() missing required argument '%s'", fname, params[i].name))
		}
		out[i] = params[i].def
	}
	if kw != nil {
		for _, name := range kw.names {
			found := false
			for i, pr := range params {
				if pr.name == name {
					if i < len(args) {
						return nil, typeErr(fmt.Sprintf("%s() got multiple values for argument '%s'", fname, name))
					}
					found = true
				}
			}
			if !found {
				return nil, typeErr(fmt.Sprintf("%s() got an unexpected keyword argument '%s'", fname, name))
			}
		}
	}
	return out, nil
}

func argInt(fname string, v Value) (int64, error) {
	if i, ok := asInt(v); ok {
		return i, nil
	}
	if u, ok := v.(*Undefined); ok {
		return 0, u.err()
	}
	return 0, typeErr(fmt.Sprintf("%s(): '%s' object cannot be interpreted as an integer", fname, typeName(v)))
}

func argStr(fname string, v Value) (string, error) {
	if s, ok := asString(v); ok {
		return s, nil
	}
	if u, ok := v.(*Undefined); ok {
		return "", u.err()
	}
	return "", typeErr(fmt.Sprintf("%s(): argument must be str, not %s", fname, typeName(v)))
}

func isNone(v Value) bool {
	_, ok := v.(NoneType)
	return ok
}
