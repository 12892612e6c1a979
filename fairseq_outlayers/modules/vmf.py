"""Former home of the continuous-output maths, kept so that ``from fairseq_outlayers.modules.vmf import ...``
keeps working: the vMF normaliser is in ``bessel.py``, the training losses and κ diagnostics in ``vmf_losses.py``,
the nearest-neighbour and faiss search in ``nn_search.py``. Nothing is defined here."""
from .bessel import (DEBYE_MIN_ORDER, DEBYE_TERMS, KAPPA_FLOOR, LogCm, bessel_iv_ratio, debye_polynomials,  # noqa: F401
                     log_bessel_iv, log_cm, log_cm_approx, log_cm_at_zero, log_cm_float64)
from .nn_search import (BLAS_MIN_QUERIES, FAISS_THREADS, FaissInnerProductIndex, candidate_log_probs,  # noqa: F401
                        import_faiss, nearest_neighbours)
from .vmf_losses import (cosine_loss, cosine_similarity, implied_cosine, kappa_alarm_bounds, l2_loss,  # noqa: F401
                         max_margin_loss, most_informative_negatives, vmf_nll_loss, vmf_released_loss)
