//! Service defaults (`SetDefaults_Service`) and the address allocation the
//! Service REST storage does on create: cluster IPs from a service CIDR,
//! node ports from 30000-32767, single-stack IPv4 families.

use super::util::*;
use crate::schema::FieldError;
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, HashMap};
use std::net::Ipv4Addr;

/// Allocates cluster IPs and node ports, remembering which Service
/// (`namespace/name`) owns each so re-reserving an owned value is a no-op
/// (updates re-run defaulting with the addresses already set).
pub trait ClusterIpAllocator: Send {
    /// A free cluster IP for `owner`.
    fn allocate_ip(&mut self, owner: &str) -> Result<String, String>;
    /// Reserves a requested cluster IP; `Err` with the real server's reason
    /// when it is outside the range or owned by someone else.
    fn reserve_ip(&mut self, ip: &str, owner: &str) -> Result<(), String>;
    /// A free node port for `owner`.
    fn allocate_node_port(&mut self, owner: &str) -> Result<i64, String>;
    /// Reserves a requested node port.
    fn reserve_node_port(&mut self, port: i64, owner: &str) -> Result<(), String>;
    /// Frees everything `owner` holds (on Service deletion).
    fn release(&mut self, owner: &str);
}

/// The default allocator: IPv4 service CIDR (default `10.96.0.0/12`) and the
/// default node port range 30000-32767, allocated in order (the real server
/// picks randomly; clients cannot rely on either). Allocation starts at `.2`:
/// a server creating the `default/kubernetes` Service reserves `.1` for it
/// with [`ClusterIpAllocator::reserve_ip`], as on a real cluster.
#[derive(Debug, Clone)]
pub struct RangeAllocator {
    base: u32,
    size: u32,
    next_ip: u32,
    ips: HashMap<u32, String>,
    next_port: i64,
    ports: BTreeMap<i64, String>,
}

/// First and last node port of the default range.
pub const NODE_PORT_RANGE: (i64, i64) = (30000, 32767);

impl Default for RangeAllocator {
    fn default() -> Self {
        Self::new(Ipv4Addr::new(10, 96, 0, 0), 12)
    }
}

impl RangeAllocator {
    /// An allocator over `network/prefix` (prefix 8..=30).
    pub fn new(network: Ipv4Addr, prefix: u8) -> Self {
        let prefix = prefix.clamp(8, 30);
        let size = 1u32 << (32 - prefix);
        let mask = !(size - 1);
        RangeAllocator {
            base: u32::from(network) & mask,
            size,
            // .1 is the kubernetes Service's address.
            next_ip: 2,
            ips: HashMap::new(),
            next_port: NODE_PORT_RANGE.0,
            ports: BTreeMap::new(),
        }
    }

    /// The CIDR served, e.g. `10.96.0.0/12`.
    pub fn cidr(&self) -> String {
        format!(
            "{}/{}",
            Ipv4Addr::from(self.base),
            32 - self.size.trailing_zeros()
        )
    }

    fn offset_of(&self, ip: &str) -> Option<u32> {
        let ip: Ipv4Addr = ip.parse().ok()?;
        let n = u64::from(u32::from(ip));
        let (base, size) = (u64::from(self.base), u64::from(self.size));
        // Network and broadcast addresses are not allocatable.
        (n > base && n < base + size - 1).then(|| (n - base) as u32)
    }
}

impl ClusterIpAllocator for RangeAllocator {
    fn allocate_ip(&mut self, owner: &str) -> Result<String, String> {
        let usable = self.size - 2;
        for _ in 0..usable {
            let off = self.next_ip;
            self.next_ip = if self.next_ip + 1 >= self.size - 1 {
                1
            } else {
                self.next_ip + 1
            };
            if let std::collections::hash_map::Entry::Vacant(e) = self.ips.entry(off) {
                e.insert(owner.to_string());
                return Ok(Ipv4Addr::from(self.base.wrapping_add(off)).to_string());
            }
        }
        Err("range is full".to_string())
    }

    fn reserve_ip(&mut self, ip: &str, owner: &str) -> Result<(), String> {
        let Some(off) = self.offset_of(ip) else {
            return Err(format!(
                "the provided IP ({ip}) is not in the valid range. The range of valid IPs is {}",
                self.cidr()
            ));
        };
        match self.ips.get(&off) {
            Some(o) if o != owner => Err("provided IP is already allocated".to_string()),
            _ => {
                self.ips.insert(off, owner.to_string());
                Ok(())
            }
        }
    }

    fn allocate_node_port(&mut self, owner: &str) -> Result<i64, String> {
        let (lo, hi) = NODE_PORT_RANGE;
        for _ in lo..=hi {
            let p = self.next_port;
            self.next_port = if p >= hi { lo } else { p + 1 };
            if let std::collections::btree_map::Entry::Vacant(e) = self.ports.entry(p) {
                e.insert(owner.to_string());
                return Ok(p);
            }
        }
        Err("range is full".to_string())
    }

    fn reserve_node_port(&mut self, port: i64, owner: &str) -> Result<(), String> {
        let (lo, hi) = NODE_PORT_RANGE;
        if !(lo..=hi).contains(&port) {
            return Err(format!(
                "provided port is not in the valid range. The range of valid ports is {lo}-{hi}"
            ));
        }
        match self.ports.get(&port) {
            Some(o) if o != owner => Err("provided port is already allocated".to_string()),
            _ => {
                self.ports.insert(port, owner.to_string());
                Ok(())
            }
        }
    }

    fn release(&mut self, owner: &str) {
        self.ips.retain(|_, o| o != owner);
        self.ports.retain(|_, o| o != owner);
    }
}

fn owner_of(obj: &Map<String, Value>) -> String {
    let meta = obj.get("metadata");
    let ns = meta
        .and_then(|m| m.get("namespace"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let name = meta
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("");
    format!("{ns}/{name}")
}

/// `SetDefaults_Service` plus allocation; `status: {loadBalancer: {}}` as Go
/// serializes the empty status.
pub(crate) fn service(
    obj: &mut Map<String, Value>,
    alloc: Option<&mut dyn ClusterIpAllocator>,
) -> Result<(), FieldError> {
    let owner = owner_of(obj);
    let Some(spec) = obj_at(obj, "spec") else {
        return Ok(());
    };
    default_str(spec, "sessionAffinity", "None");
    match spec.get("sessionAffinity").and_then(Value::as_str) {
        Some("None") => {
            spec.remove("sessionAffinityConfig");
        }
        Some("ClientIP") => {
            let has_timeout = spec
                .pointer_get(&["sessionAffinityConfig", "clientIP", "timeoutSeconds"])
                .is_some_and(|v| !v.is_null());
            if !has_timeout {
                spec.insert(
                    "sessionAffinityConfig".into(),
                    json!({"clientIP": {"timeoutSeconds": 10800}}),
                );
            }
        }
        _ => {}
    }
    default_str(spec, "type", "ClusterIP");
    let svc_type = spec
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("ClusterIP")
        .to_string();
    each_obj_in(spec, "ports", |p| {
        default_str(p, "protocol", "TCP");
        let unset = match p.get("targetPort") {
            None | Some(Value::Null) => true,
            Some(Value::Number(n)) => n.as_i64() == Some(0),
            Some(Value::String(s)) => s.is_empty(),
            _ => false,
        };
        if unset {
            if let Some(port) = p.get("port").cloned() {
                p.insert("targetPort".into(), port);
            }
        }
    });
    let has_external_ips =
        matches!(spec.get("externalIPs"), Some(Value::Array(a)) if !a.is_empty());
    let externally_accessible = svc_type == "LoadBalancer"
        || svc_type == "NodePort"
        || (svc_type == "ClusterIP" && has_external_ips);
    if externally_accessible {
        default_str(spec, "externalTrafficPolicy", "Cluster");
    }
    if matches!(svc_type.as_str(), "ClusterIP" | "NodePort" | "LoadBalancer") {
        default_nil(spec, "internalTrafficPolicy", json!("Cluster"));
    }
    if svc_type == "LoadBalancer" {
        default_nil(spec, "allocateLoadBalancerNodePorts", json!(true));
    }

    if svc_type != "ExternalName" {
        if let Some(alloc) = alloc {
            allocate_addresses(spec, &svc_type, &owner, alloc)?;
        }
    }

    if let Some(status) = obj_at(obj, "status") {
        default_nil(status, "loadBalancer", json!({}));
    }
    Ok(())
}

trait PointerGet {
    fn pointer_get(&self, path: &[&str]) -> Option<&Value>;
}

impl PointerGet for Map<String, Value> {
    fn pointer_get(&self, path: &[&str]) -> Option<&Value> {
        let (first, rest) = path.split_first()?;
        let mut v = self.get(*first)?;
        for k in rest {
            v = v.get(k)?;
        }
        Some(v)
    }
}

fn allocate_addresses(
    spec: &mut Map<String, Value>,
    svc_type: &str,
    owner: &str,
    alloc: &mut dyn ClusterIpAllocator,
) -> Result<(), FieldError> {
    // clusterIPs[0] and clusterIP mirror each other.
    if is_empty_str(spec, "clusterIP") {
        if let Some(first) = spec
            .get("clusterIPs")
            .and_then(Value::as_array)
            .and_then(|a| a.first())
            .filter(|v| v.as_str().is_some_and(|s| !s.is_empty()))
            .cloned()
        {
            spec.insert("clusterIP".into(), first);
        }
    }
    let requested = spec
        .get("clusterIP")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let headless = requested == "None";
    let ip = if headless {
        "None".to_string()
    } else if requested.is_empty() {
        alloc.allocate_ip(owner).map_err(|e| {
            FieldError::invalid(
                "spec.clusterIPs",
                json!([]),
                format!("failed to allocate a new IP: {e}"),
            )
        })?
    } else {
        alloc.reserve_ip(&requested, owner).map_err(|e| {
            FieldError::invalid(
                "spec.clusterIPs",
                json!([requested]),
                format!("failed to allocate IP {requested}: {e}"),
            )
        })?;
        requested
    };
    spec.insert("clusterIP".into(), json!(ip));
    spec.insert("clusterIPs".into(), json!([ip]));
    // Single-stack IPv4 cluster; headless Services without a selector
    // default to RequireDualStack (they may carry any family's endpoints).
    let no_selector = match spec.get("selector") {
        None | Some(Value::Null) => true,
        Some(Value::Object(m)) => m.is_empty(),
        _ => false,
    };
    let policy = if headless && no_selector {
        "RequireDualStack"
    } else {
        "SingleStack"
    };
    default_nil(spec, "ipFamilyPolicy", json!(policy));
    if matches!(spec.get("ipFamilies"), None | Some(Value::Null))
        || matches!(spec.get("ipFamilies"), Some(Value::Array(a)) if a.is_empty())
    {
        spec.insert("ipFamilies".into(), json!(["IPv4"]));
    }

    let wants_node_ports = svc_type == "NodePort"
        || (svc_type == "LoadBalancer"
            && spec.get("allocateLoadBalancerNodePorts") != Some(&Value::Bool(false)));
    if wants_node_ports {
        let mut result = Ok(());
        each_obj_in(spec, "ports", |p| {
            if result.is_err() {
                return;
            }
            if is_zero_num(p, "nodePort") {
                match alloc.allocate_node_port(owner) {
                    Ok(n) => {
                        p.insert("nodePort".into(), json!(n));
                    }
                    Err(e) => {
                        result = Err(FieldError::invalid(
                            "spec.ports[0].nodePort",
                            json!(0),
                            format!("failed to allocate a nodePort: {e}"),
                        ))
                    }
                }
            } else if let Some(n) = p.get("nodePort").and_then(Value::as_i64) {
                if let Err(e) = alloc.reserve_node_port(n, owner) {
                    result = Err(FieldError::invalid("spec.ports[0].nodePort", json!(n), e));
                }
            }
        });
        result?;
    }
    Ok(())
}

/// The Service storage's address allocation alone (cluster IPs, families,
/// node ports); see [`super::apply_defaults_only`] for why it may be run
/// separately. Objects that are not Services are left alone.
pub fn allocate_service_addresses(
    obj: &mut Value,
    alloc: &mut dyn ClusterIpAllocator,
) -> Result<(), FieldError> {
    let Some(o) = obj.as_object_mut() else {
        return Ok(());
    };
    let owner = owner_of(o);
    let Some(spec) = existing_obj(o, "spec") else {
        return Ok(());
    };
    let svc_type = spec
        .get("type")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
        .unwrap_or("ClusterIP")
        .to_string();
    if svc_type == "ExternalName" {
        return Ok(());
    }
    allocate_addresses(spec, &svc_type, &owner, alloc)
}

/// On update the real Service storage keeps the allocated addresses when the
/// new object omits them: copies `clusterIP(s)`, `ipFamilies`,
/// `ipFamilyPolicy`, `healthCheckNodePort` and each port's `nodePort`
/// (matched by port number and protocol) from `old` into `new`. Call before
/// [`super::apply_builtin_defaults`] on Service updates.
pub fn preserve_service_allocations(old: &Value, new: &mut Value) {
    let (Some(old_spec), Some(new_spec)) = (
        old.get("spec").and_then(Value::as_object),
        new.get_mut("spec").and_then(Value::as_object_mut),
    ) else {
        return;
    };
    let same_type = old_spec.get("type") == new_spec.get("type")
        || (is_empty_str(new_spec, "type")
            && old_spec.get("type").and_then(Value::as_str) == Some("ClusterIP"));
    if !same_type {
        return;
    }
    for key in [
        "clusterIP",
        "clusterIPs",
        "ipFamilies",
        "ipFamilyPolicy",
        "healthCheckNodePort",
    ] {
        if is_empty_str(new_spec, key)
            || matches!(new_spec.get(key), Some(Value::Array(a)) if a.is_empty())
        {
            if let Some(v) = old_spec.get(key) {
                new_spec.insert(key.into(), v.clone());
            }
        }
    }
    let old_ports: Vec<Map<String, Value>> = old_spec
        .get("ports")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|p| p.as_object().cloned()).collect())
        .unwrap_or_default();
    each_obj_in(new_spec, "ports", |p| {
        if !is_zero_num(p, "nodePort") {
            return;
        }
        let proto = |m: &Map<String, Value>| {
            m.get("protocol")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .unwrap_or("TCP")
                .to_string()
        };
        if let Some(op) = old_ports
            .iter()
            .find(|op| op.get("port") == p.get("port") && proto(op) == proto(p))
        {
            if let Some(np) = op.get("nodePort") {
                p.insert("nodePort".into(), np.clone());
            }
        }
    });
}
