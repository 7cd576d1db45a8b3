"""cua-cloud's options as data for :class:`deskctl.providers._option_values.OptionValues`.

Made from deskctl.providers.cua_cloud.options.Options by ``python -m deskctl.providers._option_values``:
do not edit (a test holds it equal to the class)."""

from deskctl.providers._option_values import OptionRow

TABLE: dict[str, OptionRow] = {
    'retry_attempts': ('int', 5, None, 'provider_option'),
    'retry_initial': ('float', 0.5, None, 'provider_option'),
    'retry_maximum': ('float', 8.0, None, 'provider_option'),
    'retry_scale': ('float', None, None, 'provider_option'),
    'poll_interval': ('float', 0.5, None, 'provider_option'),
    'poll_max_interval': ('float', 2.0, None, 'provider_option'),
    'request_timeout': ('float', 60.0, None, 'provider_option'),
    'destroy_timeout': ('float', 120.0, None, 'provider_option'),
    'create_lookup_seconds': ('float', 45.0, None, 'create_lookup_seconds'),
    'base_url': ('str', 'https://run.cua.ai', 'CUA_BASE_URL', None),
    'token_url': ('str', 'https://auth.cua.ai/realms/cyclops-cs/protocol/openid-connect/token', 'CUA_TOKEN_URL', None),
    'namespace': ('str', None, 'CUA_CLOUD_NAMESPACE', None),
    'warmpool': ('str', None, None, None),
    'template': ('str', None, None, None),
    'svc_suffix': ('str', None, None, None),
    'shutdown_policy': ('str', 'Retain', None, None),
    'claim_ttl_seconds': ('float', 600.0, None, 'provider_option'),
    'detached_ttl_seconds': ('float', 3600.0, None, 'provider_option'),
    'rebind_attempts': ('int', 20, None, 'provider_option'),
    'create_timeout': ('float', None, None, 'provider_option'),
}
