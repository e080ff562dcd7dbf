//! Respite's maps, whether owned by the loader ([`crate::Sockmap`]) or opened from their pins
//! under `<bpffs>/respite/` ([`Pinned`]: `respite-control sockmap off|on|status`, which must work
//! even when the control process is stuck).

use std::path::Path;

use aya::maps::{Array, Map, MapData, PerCpuArray, SockHash};

use crate::Counters;
use crate::names;
use crate::{PIN_DIR, PortFilter};

/// The SOCKHASH key: the socket's own 4-tuple, in the byte orders the C file's `struct sock_key`
/// uses (addresses network order, ports host order).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub(crate) struct SockKey {
    local_ip4: u32,
    remote_ip4: u32,
    local_port: u32,
    remote_port: u32,
}

// SAFETY: repr(C), four u32 fields, no padding: every bit pattern is a valid value.
unsafe impl aya::Pod for SockKey {}

/// The kill switch: `respite_settings[0]`, 1 = record new sockets, 0 = record none (recorded
/// sockets keep redirecting until they close).
pub trait Settings {
    /// Whether sockops records new sockets.
    fn enabled(&self) -> Result<bool, String>;
    /// Turns recording of new sockets on or off, at once.
    fn set_enabled(&mut self, on: bool) -> Result<(), String>;
}

/// Handles on the four maps.
pub(crate) struct Maps {
    pub socks: SockHash<MapData, SockKey>,
    pub ports: Array<MapData, u64>,
    pub settings: Array<MapData, u32>,
    pub counters: PerCpuArray<MapData, u64>,
}

impl Maps {
    /// Takes the maps out of `take(name)` (a loaded object or the pins).
    pub fn from(mut take: impl FnMut(&str) -> Result<Map, String>) -> Result<Maps, String> {
        fn err(name: &'static str) -> impl Fn(aya::maps::MapError) -> String {
            move |e| format!("map {name}: {e}")
        }
        Ok(Maps {
            socks: SockHash::try_from(take(names::SOCKS)?).map_err(err(names::SOCKS))?,
            ports: Array::try_from(take(names::PORTS)?).map_err(err(names::PORTS))?,
            settings: Array::try_from(take(names::SETTINGS)?).map_err(err(names::SETTINGS))?,
            counters: PerCpuArray::try_from(take(names::COUNTERS)?)
                .map_err(err(names::COUNTERS))?,
        })
    }

    pub fn counters(&self) -> Result<Counters, String> {
        let sum = |i: u32| -> Result<u64, String> {
            let values = self
                .counters
                .get(&i, 0)
                .map_err(|e| format!("reading counter {i}: {e}"))?;
            Ok(values.iter().fold(0u64, |a, v| a.wrapping_add(*v)))
        };
        Ok(Counters {
            inserts: sum(0)?,
            insert_fail: sum(1)?,
            redirect_total: sum(2)?,
            redirect_fail: sum(3)?,
            sockets: self.socks.keys().filter(|k| k.is_ok()).count() as u64,
        })
    }

    /// Writes the words of `want` that differ from `have`.
    pub fn write_ports(&mut self, want: &PortFilter, have: &PortFilter) -> Result<(), String> {
        for i in want.changed_words(have) {
            self.ports
                .set(i as u32, want.words()[i], 0)
                .map_err(|e| format!("writing the port filter: {e}"))?;
        }
        Ok(())
    }

    pub fn read_ports(&self) -> Result<PortFilter, String> {
        let mut ports = std::collections::BTreeSet::new();
        for i in 0..crate::filter::WORDS as u32 {
            let w = self
                .ports
                .get(&i, 0)
                .map_err(|e| format!("reading the port filter: {e}"))?;
            for b in 0..64u32 {
                if w >> b & 1 == 1 {
                    ports.insert((i * 64 + b) as u16);
                }
            }
        }
        Ok(PortFilter::new(&ports))
    }
}

impl Settings for Maps {
    fn enabled(&self) -> Result<bool, String> {
        self.settings
            .get(&0, 0)
            .map(|v| v == 1)
            .map_err(|e| format!("reading {}: {e}", names::SETTINGS))
    }

    fn set_enabled(&mut self, on: bool) -> Result<(), String> {
        self.settings
            .set(0, u32::from(on), 0)
            .map_err(|e| format!("writing {}: {e}", names::SETTINGS))
    }
}

/// The maps of a loaded sockmap, opened from their pins (`<bpffs>/respite/<map>`).
pub struct Pinned {
    maps: Maps,
}

impl Pinned {
    /// Opens the pins under `bpffs`.
    ///
    /// Errors: nothing pinned there ("not loaded"), or no privileges to open BPF objects.
    pub fn open(bpffs: &Path) -> Result<Pinned, String> {
        let dir = bpffs.join(PIN_DIR);
        if !dir.join(names::SETTINGS).exists() {
            return Err(format!(
                "sockmap is not loaded: nothing pinned at {}",
                dir.display()
            ));
        }
        let maps = Maps::from(|name| {
            let path = dir.join(name);
            let data = MapData::from_pin(&path).map_err(|e| {
                let why = crate::loader::chain(&e);
                let hint = if why.contains("not permitted") || why.contains("Permission denied") {
                    " (needs root, or CAP_BPF)"
                } else {
                    ""
                };
                format!("opening {}: {why}{hint}", path.display())
            })?;
            Map::from_map_data(data).map_err(|e| format!("{}: {e}", path.display()))
        })?;
        Ok(Pinned { maps })
    }

    /// The counters and the number of sockets in the map.
    pub fn counters(&self) -> Result<Counters, String> {
        self.maps.counters()
    }

    /// The ports in the filter now.
    pub fn ports(&self) -> Result<Vec<u16>, String> {
        Ok(self.maps.read_ports()?.ports())
    }
}

impl Settings for Pinned {
    fn enabled(&self) -> Result<bool, String> {
        self.maps.enabled()
    }
    fn set_enabled(&mut self, on: bool) -> Result<(), String> {
        self.maps.set_enabled(on)
    }
}
