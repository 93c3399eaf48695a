//! The gates a cut-out passes, behind one door. `AppState::admit` checks
//! the account (not suspended, a plan with API access), the appliance (the
//! model loaded, the database writable), takes one of the account's request
//! slots and, on a plan with a monthly limit, reserves an image of the month;
//! then it takes a place in the work queue, which bounds the requests waiting
//! and the uploads held. The inference pool's turn comes inside the pipeline.
//! `Admission::cut_out_and_charge` charges only once the cut-out worked: an
//! admission dropped on any error before releases its slot, its reservation
//! and its place in the queue, and costs nothing.

use super::AppState;
use crate::domain::{Month, OptionField, SizeMode, SubjectType};
use crate::error::{ApiError, MAX_IMAGE_BYTES};
use crate::imaging::Finish;
use crate::pipeline::{CutOut, Held, Place};
use crate::store::{Caller, Refusal, Slot};

/// The body a request declares, and the most any body may be.
pub struct Upload {
    pub declared: Option<u64>,
    pub most: u64,
}

/// A request let through every gate, holding its slot and its place in the queue.
pub struct Admission<'a> {
    state: &'a AppState,
    slot: Slot,
    place: Place<'a>,
}

pub struct Charged<'a> {
    pub cut: CutOut,
    /// The month's count after this image.
    pub used: u32,
    pub month: Month,
    /// The memory its answer holds, reserved until the answer is sent.
    pub held: Held<'a>,
    pub charge: Charge,
}

/// One image counted for an account, to be taken back if its answer
/// could not be written.
pub struct Charge {
    account_id: i64,
    month: Month,
}

impl Charge {
    pub fn refund(self, state: &AppState) {
        if let Err(e) = state.store.refund(self.account_id, self.month) {
            log::error!("could not take back the charge of an answer not delivered: {e:#}");
        }
    }
}

impl AppState {
    /// Lets one cut-out for `caller` in, or says which gate refused it. A
    /// declared body over `upload.most` is refused after the account's gates
    /// and before the queue; an undeclared one holds a place for the most.
    pub fn admit(&self, caller: &Caller, upload: Upload) -> Result<Admission<'_>, ApiError> {
        let slot = self.admit_account(caller)?;
        if upload.declared.is_some_and(|n| n > upload.most) {
            return Err(ApiError::FileTooLarge);
        }
        let place = self
            .pipeline
            .queue
            .join_as(
                Some(caller.account.id),
                upload.declared.unwrap_or(upload.most),
            )
            .ok_or_else(|| ApiError::Unavailable("the work queue is full".into()))?;
        Ok(Admission {
            state: self,
            slot,
            place,
        })
    }

    fn admit_account(&self, caller: &Caller) -> Result<Slot, ApiError> {
        let account = &caller.account;
        if account.suspended {
            return Err(ApiError::AccountSuspended);
        }
        if !account.plan.api_access {
            return Err(ApiError::PlanNotAllowed);
        }
        self.pipeline
            .default_model()
            .inference
            .ready()
            .map_err(|e| ApiError::Unavailable(e.to_string()))?;
        self.database_writable()
            .map_err(|why| ApiError::Unavailable(format!("database: {why}")))?;
        let month = Month::of_unix(self.clock.now_unix());
        self.store
            .admit(account, month)
            .map_err(|e| ApiError::Unavailable(format!("database: {e}")))?
            .map_err(|refusal| match refusal {
                Refusal::TooManyConcurrent { limit } => {
                    ApiError::TooManyConcurrentRequests { limit }
                }
                Refusal::QuotaExceeded { limit } => ApiError::QuotaExceeded { limit },
            })
    }
}

impl<'a> Admission<'a> {
    /// The file at `url` (remove.bg's `field`), fetched inside this
    /// request's slot and held as an upload is; a failed fetch costs nothing.
    pub fn fetch(&mut self, field: &'static str, url: &str) -> Result<Vec<u8>, ApiError> {
        self.place.hold_more(MAX_IMAGE_BYTES);
        let file = crate::fetch::fetch(&self.state.fetch_allow, url, MAX_IMAGE_BYTES)
            .map_err(|why| ApiError::Fetch { field, why })?;
        // Named as the field it came from, not as an upload.
        match crate::imaging::format_of(&file) {
            Ok(_) => Ok(file),
            Err(_) => Err(ApiError::Fetch {
                field,
                why: crate::fetch::FetchError::NotAnImage,
            }),
        }
    }

    /// The files of the backdrop named `name`, held as uploads are: its
    /// images are decoded as a background's (`memory::need`).
    pub fn backdrop(&mut self, name: &str) -> Result<crate::backdrops::Files, ApiError> {
        use crate::backdrops::BackdropError;
        let backdrops = self.state.backdrops();
        let refused = |e: BackdropError| match e {
            BackdropError::Io(e) => {
                ApiError::Internal(anyhow::Error::new(e).context("reading a backdrop"))
            }
            other => ApiError::InvalidOption {
                field: OptionField::Backdrop,
                why: format!("{other}; GET /api/backdrops lists them"),
            },
        };
        let backdrop = backdrops.find(name).map_err(refused)?;
        self.place.hold_more(backdrop.bytes);
        let files = backdrops.files(&backdrop).map_err(refused)?;
        Ok(files)
    }

    /// Cuts out `image` and, only once that worked and its client still
    /// waits, counts it. A client gone before its model runs costs nothing
    /// and no work; one gone while it runs costs nothing either, as what
    /// is not delivered is not charged (remove.bg's rule). The answer is
    /// counted before it is written, so a client that got it is charged
    /// whatever happens next; `Charge::refund` takes back one whose
    /// writing failed.
    pub fn cut_out_and_charge(
        mut self,
        caller: &Caller,
        image: &[u8],
        (size, subject): (SizeMode, SubjectType),
        finish: &Finish,
        client_gone: &dyn Fn() -> bool,
    ) -> Result<Charged<'a>, ApiError> {
        let state = self.state;
        let cut =
            state
                .pipeline
                .cut_out(&mut self.place, image, size, subject, finish, client_gone)?;
        if client_gone() {
            return Err(ApiError::ClientGone);
        }
        // The file, and in a JSON answer its base64 twice over while it is
        // made; the caller shrinks it to what it sends.
        let held = self.place.hand_over(cut.bytes.len() as u64 * 4);
        let now = state.clock.now_unix();
        let month = Month::of_unix(now);
        let used = state
            .store
            .charge(self.slot, caller, month, now)
            .map_err(|e| {
                let why = format!("could not record a charge: {e}");
                state.database_failed(&why);
                ApiError::Unavailable(format!("database: {why}"))
            })?;
        Ok(Charged {
            cut,
            used,
            month,
            held,
            charge: Charge {
                account_id: caller.account.id,
                month,
            },
        })
    }
}
