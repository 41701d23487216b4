//! Timestamps as PostgreSQL writes them as text (`2011-04-20 15:40:00+00`,
//! a fraction of a second without its trailing zeros), where COPY, the
//! shell, `tablesql query` and the wire server (a result in text) write
//! values as text.
//!
//! Arrow writes `2011-04-20T15:40:00Z`, and a chrono format string given
//! to its formatter is parsed again for every value: a COPY TO of 1,000,000
//! rows with a timestamp column took 1.85 s against 0.47 s before it
//! (BENCHMARKS.md). Here a microsecond timestamp column, in UTC or without
//! a zone (every stored one), is written digit by digit; any other column
//! keeps Arrow's formatter with [`super::copy::text_options`].

use std::fmt::Write;

use datafusion::arrow::array::{Array, AsArray, PrimitiveArray, StringArray, StringBuilder};
use datafusion::arrow::datatypes::{DataType, TimeUnit, TimestampMicrosecondType};
use datafusion::arrow::error::ArrowError;
use datafusion::arrow::util::display::{ArrayFormatter, DisplayIndex, FormatOptions, FormatResult};

/// The formatter of a column's values as text: PostgreSQL's timestamps,
/// Arrow's formatter with `options` for the rest.
pub fn formatter<'a>(
    array: &'a dyn Array,
    options: &FormatOptions<'a>,
) -> Result<ArrayFormatter<'a>, ArrowError> {
    match timestamp_zone(array.data_type()) {
        Some(zone) => Ok(ArrayFormatter::new(
            Box::new(Timestamps {
                array: array.as_primitive::<TimestampMicrosecondType>(),
                zone,
                null: options.null(),
            }),
            options.safe(),
        )),
        None => ArrayFormatter::try_new(array, options),
    }
}

/// For a timestamp type written here, whether it is written with its zone
/// (`+00`); `None` for any other type.
pub fn timestamp_zone(data_type: &DataType) -> Option<bool> {
    match data_type {
        DataType::Timestamp(TimeUnit::Microsecond, None) => Some(false),
        DataType::Timestamp(TimeUnit::Microsecond, Some(tz))
            if ["+00:00", "+00", "UTC", "Z"].contains(&tz.as_ref()) =>
        {
            Some(true)
        }
        _ => None,
    }
}

/// A timestamp column written here ([`timestamp_zone`]) as a column of its
/// text (the wire server's results, `ts::text`); `None` for any other.
pub fn timestamp_strings(array: &dyn Array) -> Option<StringArray> {
    let zone = timestamp_zone(array.data_type())?;
    let stamps = array.as_primitive_opt::<TimestampMicrosecondType>()?;
    let mut out = StringBuilder::with_capacity(stamps.len(), stamps.len() * 24);
    for stamp in stamps {
        match stamp {
            Some(micros) => {
                write_timestamp(micros, zone, &mut out).ok()?;
                out.append_value("");
            }
            None => out.append_null(),
        }
    }
    Some(out.finish())
}

struct Timestamps<'a> {
    array: &'a PrimitiveArray<TimestampMicrosecondType>,
    /// In UTC: written with `+00`.
    zone: bool,
    null: &'a str,
}

impl DisplayIndex for Timestamps<'_> {
    fn write(&self, idx: usize, f: &mut dyn Write) -> FormatResult {
        if self.array.is_null(idx) {
            f.write_str(self.null)?;
            return Ok(());
        }
        write_timestamp(self.array.value(idx), self.zone, f)?;
        Ok(())
    }
}

const MICROS_A_DAY: i64 = 86_400_000_000;

/// Microseconds since 1970 in PostgreSQL's text form.
pub fn write_timestamp(micros: i64, zone: bool, f: &mut dyn Write) -> std::fmt::Result {
    let (days, time) = (
        micros.div_euclid(MICROS_A_DAY),
        micros.rem_euclid(MICROS_A_DAY),
    );
    let (year, month, day) = civil(days);
    let seconds = time / 1_000_000;
    let fraction = time % 1_000_000;
    if (1..=9999).contains(&year) {
        write!(f, "{year:04}-{month:02}-{day:02}")?;
    } else {
        // Outside four digits PostgreSQL writes years before 1 as BC.
        let (shown, era) = if year <= 0 {
            (1 - year, " BC")
        } else {
            (year, "")
        };
        write!(f, "{shown:04}-{month:02}-{day:02}")?;
        return finish(seconds, fraction, zone, era, f);
    }
    finish(seconds, fraction, zone, "", f)
}

fn finish(
    seconds: i64,
    fraction: i64,
    zone: bool,
    era: &str,
    f: &mut dyn Write,
) -> std::fmt::Result {
    write!(
        f,
        " {:02}:{:02}:{:02}",
        seconds / 3600,
        seconds / 60 % 60,
        seconds % 60
    )?;
    if fraction != 0 {
        // Six digits, the trailing zeros dropped.
        let mut digits = fraction;
        let mut width = 6;
        while digits % 10 == 0 {
            digits /= 10;
            width -= 1;
        }
        write!(f, ".{digits:0width$}")?;
    }
    if zone {
        f.write_str("+00")?;
    }
    f.write_str(era)
}

/// The proleptic Gregorian date of a day counted from 1970-01-01 (Howard
/// Hinnant's `civil_from_days`).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(micros: i64, zone: bool) -> String {
        let mut s = String::new();
        write_timestamp(micros, zone, &mut s).unwrap_or_else(|e| panic!("{e}"));
        s
    }

    #[test]
    fn timestamps_are_written_as_postgresql_writes_them() {
        // 2011-04-20 15:40:00 UTC.
        let at = 1_303_314_000_000_000;
        assert_eq!(text(at, true), "2011-04-20 15:40:00+00");
        assert_eq!(text(at, false), "2011-04-20 15:40:00");
        assert_eq!(text(at + 500_000, true), "2011-04-20 15:40:00.5+00");
        assert_eq!(text(at + 123_456, true), "2011-04-20 15:40:00.123456+00");
        assert_eq!(text(at + 10, true), "2011-04-20 15:40:00.00001+00");
        assert_eq!(text(0, true), "1970-01-01 00:00:00+00");
        assert_eq!(text(-1, false), "1969-12-31 23:59:59.999999");
        // Leap days, and the ends of what Edm.DateTime holds.
        assert_eq!(text(951_782_400_000_000, false), "2000-02-29 00:00:00");
        assert_eq!(
            text(-11_644_473_600_000_000, true),
            "1601-01-01 00:00:00+00"
        );
        assert_eq!(
            text(253_402_300_799_000_000, true),
            "9999-12-31 23:59:59+00"
        );
    }

    #[test]
    fn every_day_of_four_centuries_matches_chrono() {
        let start = chrono::NaiveDate::from_ymd_opt(1800, 1, 1).map(|d| d.and_hms_opt(0, 0, 0));
        let Some(Some(start)) = start else {
            panic!("a start date")
        };
        for day in 0..146_097 {
            let at = start + chrono::Duration::days(day) + chrono::Duration::seconds(day % 86_400);
            let micros = at.and_utc().timestamp_micros();
            assert_eq!(
                text(micros, false),
                at.format("%Y-%m-%d %H:%M:%S").to_string(),
                "{micros}"
            );
        }
    }
}
