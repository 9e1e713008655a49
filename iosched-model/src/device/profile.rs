//! Device profiles given on the command line (`--device-profile`): JSON read and checked.
//!
//! Owns: [`DeviceModel::load`]. Must not: fit.

use super::{DeviceError, DeviceModel};

impl DeviceModel {
    /// Loads a profile (JSON: `{"kind": "disk", "rpm": 7200, ..., "capacity_bytes": N}`,
    /// `{"kind": "flash", "latency_ns": .., "ns_per_sector": .., "parallelism": ..}`, or a
    /// fitted model as `replay --json` prints it).
    pub fn load(path: &std::path::Path) -> Result<DeviceModel, DeviceError> {
        let err = |reason: String| DeviceError::Profile {
            path: path.display().to_string(),
            reason,
        };
        let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
        Self::from_profile_text(&text).map_err(err)
    }

    /// [`DeviceModel::load`] of a profile's text: the model, or why the text is not one.
    pub fn from_profile_text(text: &str) -> Result<DeviceModel, String> {
        let m: DeviceModel = serde_json::from_str(text).map_err(|e| e.to_string())?;
        match &m {
            DeviceModel::Disk {
                params,
                capacity_bytes,
            } => {
                iosched_disk::DiskModel::new(params.clone(), *capacity_bytes)
                    .map_err(|e| e.to_string())?;
            }
            DeviceModel::Flash(f) => {
                if !(f.latency_ns >= 0.0 && f.ns_per_sector >= 0.0 && f.parallelism >= 1) {
                    return Err(
                        "flash needs latency_ns >= 0, ns_per_sector >= 0, parallelism >= 1".into(),
                    );
                }
            }
            DeviceModel::Rotational(r) => {
                if !(r.overhead_ns >= 0.0 && r.ns_per_sector >= 0.0 && r.latency_ns >= 0.0) {
                    return Err("overhead_ns, ns_per_sector and latency_ns must be >= 0".into());
                }
            }
        }
        Ok(m)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_profiles_are_refused_with_their_path() {
        let dir = std::env::temp_dir().join(format!("iosched-devprof-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("p.json");
        std::fs::write(&p, r#"{"kind":"disk","rpm":0,"transfer_mb_s":100,"overhead_us":1,"seek_min_ms":1,"seek_max_ms":2,"seek_knee":0.2,"capacity_bytes":1000000}"#).unwrap();
        let e = DeviceModel::load(&p).unwrap_err().to_string();
        assert!(e.contains("p.json") && e.contains("rpm"), "{e}");
        std::fs::write(&p, "{").unwrap();
        assert!(DeviceModel::load(&p).is_err());
        std::fs::write(&p, r#"{"kind":"disk","rpm":7200,"transfer_mb_s":120,"overhead_us":100,"seek_min_ms":0.8,"seek_max_ms":8,"seek_knee":0.2,"capacity_bytes":1073741824}"#).unwrap();
        let m = DeviceModel::load(&p).unwrap();
        // Contiguous 4 KiB: overhead + transfer only.
        let t = m.service_ns(8, 8, 8);
        assert!(
            (t as f64 - (100_000.0 + 4096.0 / 120e6 * 1e9)).abs() < 10.0,
            "{t}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
