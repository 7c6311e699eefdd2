"""The SchedulingPolicy API: the wire model users write (polsched.io/v1alpha1), its
defaults and validation, and the internal model the scheduler runs.

Shared by the operator, the validating webhook and `polsched validate`; purely
data-manipulative, no I/O (crd.py reads the CRD manifest shipped with the package).
"""

from polsched.api.loader import is_policy_object, load_policy
from polsched.api.model import (
    API_VERSION,
    GROUP,
    KIND,
    PLURAL,
    VERSION,
    FieldError,
    Policy,
    PolicyError,
    RuntimeConfig,
)
from polsched.extender.config import ExtenderConfig, ManagedResource

__all__ = [
    "API_VERSION", "GROUP", "KIND", "PLURAL", "VERSION", "ExtenderConfig", "FieldError",
    "ManagedResource", "Policy", "PolicyError", "RuntimeConfig", "is_policy_object",
    "load_policy",
]
