package ovs

import (
	"encoding/json"
	"os"
	"slices"
	"testing"

	"github.com/ovn-kubernetes/libovsdb/model"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"
)

// TestModelMatchesSchema checks the hand-written models against the schema OVS
// installs: libovsdb refuses a model whose columns or types do not match.
func TestModelMatchesSchema(t *testing.T) {
	data, err := os.ReadFile("/usr/share/openvswitch/vswitch.ovsschema")
	if err != nil {
		t.Skipf("skipping: no OVS schema installed: %v", err)
	}
	var schema ovsdb.DatabaseSchema
	if err := json.Unmarshal(data, &schema); err != nil {
		t.Fatal(err)
	}
	clientModel, err := databaseModel()
	if err != nil {
		t.Fatal(err)
	}
	if _, errs := model.NewDatabaseModel(schema, clientModel); len(errs) > 0 {
		t.Fatalf("model does not match the schema: %v", errs)
	}
}

func TestTableMonitorsAskForModelColumns(t *testing.T) {
	for _, tm := range tableMonitors() {
		if len(tm.Fields) == 0 || slices.Contains(tm.Fields, "_uuid") {
			t.Errorf("monitor of %s asks for %v", tm.Table, tm.Fields)
		}
	}
	if got := modelColumns(&portRow{}); !slices.Equal(got, []string{"name", "interfaces", "external_ids"}) {
		t.Errorf("port columns = %v", got)
	}
}
