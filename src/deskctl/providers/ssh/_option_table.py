"""ssh's options as data for :class:`deskctl.providers._option_values.OptionValues`.

Made from deskctl.providers.ssh.options.Options by ``python -m deskctl.providers._option_values``:
do not edit (a test holds it equal to the class)."""

from deskctl.providers._option_values import OptionRow

TABLE: dict[str, OptionRow] = {
    'host': ('str', None, 'DESKCTL_SSH_HOST', None),
    'port': ('int', None, None, 'provider_option'),
    'user': ('str', None, None, None),
    'ssh_config': ('any', True, None, None),
    'jump': ('str', None, None, None),
    'key_file': ('str', None, 'DESKCTL_SSH_KEY_FILE', None),
    'known_hosts': ('str', None, 'DESKCTL_SSH_KNOWN_HOSTS', None),
    'accept_new_host_key': ('bool', False, None, None),
    'agent': ('bool', True, None, None),
    'xvfb_path': ('str', 'Xvfb', None, None),
    'remote_dir': ('str', None, 'DESKCTL_SSH_REMOTE_DIR', None),
    'connect_timeout': ('float', 15.0, None, 'provider_option'),
    'compression': ('bool', False, None, None),
    'incremental_capture': ('bool', True, None, None),
    'window_manager': ('bool', False, None, None),
    'window_manager_command': ('str', 'openbox', None, None),
    'browser': ('str', None, None, None),
}
