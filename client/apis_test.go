package client_test

import (
	"context"
	"reflect"
	"testing"

	"github.com/kvfence/kvfence/client"
	"github.com/kvfence/kvfence/kvfence"
)

// servedDiffers are the methods that the embedded receiver (Admin,
// Receiver) and the client both have with other results, each for a
// reason the package documentation gives: a served caller needs what the
// receiver alone knows.
var servedDiffers = map[string]string{
	"Activate": "the served answer also carries the request bytes, for the worker's Assignment; it embeds the Grant",
	"Grant":    "the served answer also says whether the grant expired by the receiver's clock, which the caller cannot read",
	"Status":   "the served answer covers one scope or all, with the audit seq read before them (Receiver.Status and Scopes)",
	"Close":    "closing a client only drops idle connections and cannot fail",
}

// Ensure that every method the embedded and the served Go APIs share
// takes the same arguments, past the served one's context and the
// embedded Submit's authenticated caller, and returns the same results,
// except the few listed in servedDiffers, so that code moves between an
// embedded receiver and a served one by changing the handle.
func TestAPIs_Agree(t *testing.T) {
	ctxType := reflect.TypeFor[context.Context]()
	served := reflect.TypeFor[*client.Client]()
	var shared int
	for _, embedded := range []reflect.Type{reflect.TypeFor[*kvfence.Admin](), reflect.TypeFor[*kvfence.Receiver]()} {
		for i := range embedded.NumMethod() {
			em := embedded.Method(i)
			sm, ok := served.MethodByName(em.Name)
			if !ok {
				continue
			}
			shared++
			if _, ok := servedDiffers[em.Name]; ok {
				continue
			}
			ein, sin := params(em.Type), params(sm.Type)
			if len(sin) == 0 || sin[0] != ctxType {
				t.Errorf("client.%s does not take a context first", em.Name)
				continue
			}
			sin = sin[1:]
			if len(ein) > 0 && ein[0] == ctxType {
				ein = ein[1:]
			}
			if em.Name == "Submit" && len(ein) > 0 && ein[0].Kind() == reflect.String {
				// The served caller is the channel's identity, not an argument.
				ein = ein[1:]
			}
			if !reflect.DeepEqual(ein, sin) {
				t.Errorf("%s: embedded takes %v, served %v", em.Name, ein, sin)
			}
			if er, sr := results(em.Type), results(sm.Type); !reflect.DeepEqual(er, sr) {
				t.Errorf("%s: embedded returns %v, served %v", em.Name, er, sr)
			}
		}
	}
	for name := range servedDiffers {
		if _, ok := served.MethodByName(name); !ok {
			t.Errorf("servedDiffers names %s, which the client does not have", name)
		}
	}
	if shared < 10 {
		t.Fatalf("only %d shared methods found", shared)
	}
}

// params returns a method's parameters after its receiver.
func params(f reflect.Type) []reflect.Type {
	var out []reflect.Type
	for i := 1; i < f.NumIn(); i++ {
		out = append(out, f.In(i))
	}
	return out
}

// results returns a method's results.
func results(f reflect.Type) []reflect.Type {
	var out []reflect.Type
	for i := range f.NumOut() {
		out = append(out, f.Out(i))
	}
	return out
}
