"""daytona's options as data for :class:`deskctl.providers._option_values.OptionValues`.

Made from deskctl.providers.daytona.options.Options by ``python -m deskctl.providers._option_values``:
do not edit (a test holds it equal to the class)."""

from deskctl.providers._option_values import OptionRow

TABLE: dict[str, OptionRow] = {
    'retry_attempts': ('int', 5, None, 'provider_option'),
    'retry_initial': ('float', 0.5, None, 'provider_option'),
    'retry_maximum': ('float', 8.0, None, 'provider_option'),
    'retry_scale': ('float', None, None, 'provider_option'),
    'poll_interval': ('float', 0.2, None, 'provider_option'),
    'poll_max_interval': ('float', 2.0, None, 'provider_option'),
    'request_timeout': ('float', 60.0, None, 'provider_option'),
    'destroy_timeout': ('float', 300.0, None, 'provider_option'),
    'create_lookup_seconds': ('float', 45.0, None, 'create_lookup_seconds'),
    'api_url': ('str', 'https://app.daytona.io/api', 'DAYTONA_API_URL', None),
    'target': ('str', None, 'DAYTONA_TARGET', None),
    'snapshot': ('str', None, None, None),
    'auto_stop_minutes': ('int', None, None, 'provider_option'),
    'ttl_minutes': ('int', None, None, 'provider_option'),
    'create_timeout': ('float', 120.0, None, 'provider_option'),
    'snapshot_timeout': ('float', 600.0, None, 'provider_option'),
}
