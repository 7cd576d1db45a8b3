"""use-computer's options as data for :class:`deskctl.providers._option_values.OptionValues`.

Made from deskctl.providers.use_computer.options.Options by ``python -m deskctl.providers._option_values``:
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
    'destroy_timeout': ('float', 60.0, None, 'provider_option'),
    'create_lookup_seconds': ('float', 45.0, None, 'create_lookup_seconds'),
    'base_url': ('str', 'https://api.use.computer', 'USE_COMPUTER_BASE_URL', None),
    'ephemeral': ('bool', True, None, None),
    'host': ('str', None, 'USE_COMPUTER_HOST', None),
    'version': ('str', None, 'USE_COMPUTER_VERSION', None),
    'snapshot': ('str', None, 'USE_COMPUTER_SNAPSHOT', None),
    'reservation_id': ('str', None, 'USE_COMPUTER_RESERVATION_ID', None),
    'resources': ('any', None, None, None),
    'shell': ('str', None, None, None),
    'create_timeout': ('float', 180.0, None, 'provider_option'),
}
