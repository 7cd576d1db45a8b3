"""kubernetes's options as data for :class:`deskctl.providers._option_values.OptionValues`.

Made from deskctl.providers.kubernetes.options.Options by ``python -m deskctl.providers._option_values``:
do not edit (a test holds it equal to the class)."""

from deskctl.providers._option_values import OptionRow

TABLE: dict[str, OptionRow] = {
    'kubeconfig': ('str', None, 'KUBECONFIG', None),
    'context': ('str', None, None, None),
    'namespace': ('str', None, None, None),
    'image': ('str', None, None, None),
    'image_pull_policy': ('str', 'IfNotPresent', None, None),
    'memory': ('str', '1Gi', None, None),
    'cpus': ('any', None, None, None),
    'agent_port': ('int', None, None, 'provider_option'),
    'expiry_grace': ('float', 60.0, None, 'provider_option'),
    'grace_seconds': ('float', 1.0, None, 'provider_option'),
    'destroy_timeout': ('float', 60.0, None, 'provider_option'),
    'api_timeout': ('float', 30.0, None, 'provider_option'),
    'usd_per_hour': ('float', 0.0, None, 'provider_option'),
}
