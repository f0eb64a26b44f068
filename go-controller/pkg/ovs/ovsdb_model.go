package ovs

import (
	"fmt"
	"reflect"

	"github.com/ovn-kubernetes/libovsdb/client"
	"github.com/ovn-kubernetes/libovsdb/model"
)

// Table names of the Open_vSwitch schema that kovs uses.
const (
	dbName         = "Open_vSwitch"
	tableOVS       = "Open_vSwitch"
	tableBridge    = "Bridge"
	tablePort      = "Port"
	tableInterface = "Interface"
	tableFlowTable = "Flow_Table"
)

// The model structs below carry only the columns kovs reads or writes; the
// monitor asks ovsdb-server for those columns only. Optional columns (min 0,
// max 1 in the schema) are pointers, as libovsdb requires.

// openvSwitchRow is the single row of the Open_vSwitch table.
type openvSwitchRow struct {
	UUID          string            `ovsdb:"_uuid"`
	Bridges       []string          `ovsdb:"bridges"`
	OtherConfig   map[string]string `ovsdb:"other_config"`
	ExternalIDs   map[string]string `ovsdb:"external_ids"`
	DatapathTypes []string          `ovsdb:"datapath_types"`
	NextCfg       int               `ovsdb:"next_cfg"`
	CurCfg        int               `ovsdb:"cur_cfg"`
}

// bridgeRow is a row of the Bridge table.
type bridgeRow struct {
	UUID         string            `ovsdb:"_uuid"`
	Name         string            `ovsdb:"name"`
	Ports        []string          `ovsdb:"ports"`
	DatapathType string            `ovsdb:"datapath_type"`
	FailMode     *string           `ovsdb:"fail_mode"`
	Protocols    []string          `ovsdb:"protocols"`
	OtherConfig  map[string]string `ovsdb:"other_config"`
	ExternalIDs  map[string]string `ovsdb:"external_ids"`
	DatapathID   *string           `ovsdb:"datapath_id"` // set by ovs-vswitchd once it created the bridge
	FlowTables   map[int]string    `ovsdb:"flow_tables"` // OpenFlow table -> Flow_Table row
}

// flowTableRow is a row of the Flow_Table table: how ovs-vswitchd bounds one OpenFlow
// table of the bridges that map a table to it.
type flowTableRow struct {
	UUID           string            `ovsdb:"_uuid"`
	FlowLimit      *int              `ovsdb:"flow_limit"`
	OverflowPolicy *string           `ovsdb:"overflow_policy"`
	Groups         []string          `ovsdb:"groups"`
	ExternalIDs    map[string]string `ovsdb:"external_ids"`
}

// portRow is a row of the Port table.
type portRow struct {
	UUID        string            `ovsdb:"_uuid"`
	Name        string            `ovsdb:"name"`
	Interfaces  []string          `ovsdb:"interfaces"`
	ExternalIDs map[string]string `ovsdb:"external_ids"`
}

// interfaceRow is a row of the Interface table.
type interfaceRow struct {
	UUID          string            `ovsdb:"_uuid"`
	Name          string            `ovsdb:"name"`
	Type          string            `ovsdb:"type"`
	Options       map[string]string `ovsdb:"options"`
	ExternalIDs   map[string]string `ovsdb:"external_ids"`
	Ofport        *int              `ovsdb:"ofport"`
	OfportRequest *int              `ovsdb:"ofport_request"`
	MTURequest    *int              `ovsdb:"mtu_request"`
	MAC           *string           `ovsdb:"mac"`
	MACInUse      *string           `ovsdb:"mac_in_use"`
	Error         *string           `ovsdb:"error"`
}

// modelTables maps each table kovs uses to its model.
func modelTables() map[string]model.Model {
	return map[string]model.Model{
		tableOVS:       &openvSwitchRow{},
		tableBridge:    &bridgeRow{},
		tablePort:      &portRow{},
		tableInterface: &interfaceRow{},
		tableFlowTable: &flowTableRow{},
	}
}

// databaseModel is the client database model of the tables kovs uses.
func databaseModel() (model.ClientDBModel, error) {
	m, err := model.NewClientDBModel(dbName, modelTables())
	if err != nil {
		return model.ClientDBModel{}, fmt.Errorf("build the %s database model: %w", dbName, err)
	}
	return m, nil
}

// tableMonitors asks for exactly the columns of each model.
func tableMonitors() []client.TableMonitor {
	var tables []client.TableMonitor
	for name, m := range modelTables() {
		tables = append(tables, client.TableMonitor{Table: name, Fields: modelColumns(m)})
	}
	return tables
}

// modelColumns lists the columns a model struct maps, _uuid excluded.
func modelColumns(m model.Model) []string {
	t := reflect.TypeOf(m).Elem()
	var cols []string
	for i := range t.NumField() {
		if col := t.Field(i).Tag.Get("ovsdb"); col != "" && col != "_uuid" {
			cols = append(cols, col)
		}
	}
	return cols
}

// ptr returns a pointer to v, or nil for the zero value: the OVSDB encoding of an
// optional column that is set to v, or empty.
func ptr[T comparable](v T) *T {
	var zero T
	if v == zero {
		return nil
	}
	return &v
}

// deref returns *p, or the zero value for nil.
func deref[T any](p *T) T {
	if p == nil {
		var zero T
		return zero
	}
	return *p
}
