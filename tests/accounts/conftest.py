from tests.approvals.conftest import reviewer
from tests.oidc_provider.harness import oidc_provider, sso

__all__ = ["oidc_provider", "reviewer", "sso"]
