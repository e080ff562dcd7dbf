//! The proxy's availability zone (Envoy `node.locality.zone`) on listeners whose
//! `read_policy` is `LOCAL_ZONE_AFFINITY*`: the data plane's `local_zone`. A Listener resource
//! does not carry it, so it is set from the file's `node` or the xDS bootstrap's node.

use super::ListenerDraft;

/// Zone given to zone-policy listeners checked alone ([`super::listener`]), before the node's
/// zone is known.
pub(super) const STAND_IN_ZONE: &str = "stand-in-zone";

/// Sets `draft`'s `local_zone` to `zone` if its read policy is a zone policy (other listeners
/// are left as they are: the data plane refuses `local_zone` without one).
///
/// Errors: a zone policy and no zone (`None` or empty): the message names
/// `redis_proxy.settings.read_policy` and `node.locality.zone`.
pub fn set_local_zone(draft: &mut ListenerDraft, zone: Option<&str>) -> Result<(), String> {
    let Some(policy) = draft.listener.read_policy.as_ref() else {
        return Ok(());
    };
    if !policy.get_ref().zone_aware() {
        return Ok(());
    }
    match zone.filter(|z| !z.is_empty()) {
        Some(z) => {
            draft.listener.local_zone = Some(respite::config::raw::unspanned(z.to_owned()));
            Ok(())
        }
        None => Err(
            "redis_proxy.settings.read_policy: a LOCAL_ZONE_AFFINITY policy needs the proxy's \
             zone, node.locality.zone"
                .to_owned(),
        ),
    }
}
