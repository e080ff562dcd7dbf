//! respite-control's admin endpoint: `/config_dump` and `/xds`.
