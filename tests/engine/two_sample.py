"""Two-sample chi-square homogeneity of category samples (the engine's sampled-output tests)."""
import torch
from scipy import stats


def chi2_homogeneity(a: torch.Tensor, b: torch.Tensor, min_count: int = 10) -> tuple[float, int]:
    """(statistic, degrees of freedom) of the chi-square homogeneity test of two samples of category ids;
    categories seen fewer than min_count times in both samples together are pooled into one."""
    cats = torch.cat([a, b]).unique()
    ca = torch.stack([(a == c).sum() for c in cats]).double()
    cb = torch.stack([(b == c).sum() for c in cats]).double()
    keep = (ca + cb) >= min_count
    ca = torch.cat([ca[keep], ca[~keep].sum()[None]])
    cb = torch.cat([cb[keep], cb[~keep].sum()[None]])
    nz = (ca + cb) > 0
    ca, cb = ca[nz], cb[nz]
    na, nb = ca.sum(), cb.sum()
    tot = ca + cb
    ea, eb = tot * na / (na + nb), tot * nb / (na + nb)
    return float(((ca - ea) ** 2 / ea + (cb - eb) ** 2 / eb).sum()), len(tot) - 1


def chi2_two_sample(a: torch.Tensor, b: torch.Tensor, min_count: int = 10) -> float:
    """p-value of chi2_homogeneity."""
    stat, dof = chi2_homogeneity(a, b, min_count)
    return float(stats.chi2.sf(stat, dof))
