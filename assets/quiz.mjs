// Self-check questions at the end of each chapter, answered by the page itself: the static website has no kernel.
//
// Loaded on every page (_config.yml); on the pages that assets/quizzes.json names (the last page of each chapter) it
// adds a section "Check yourself: chapter N" before the page's final "Next:" paragraph, folded in a <details>.
// A question is a fieldset: radio buttons, answered as soon as one is chosen (arrow keys included), or a field for a
// number with a Check button (Enter works too). The verdict, "Right." or "Not quite.", and why, go to a live region.

const DATA = new URL('quizzes.json', import.meta.url);
const ROOT = new URL('../', import.meta.url);  // the site's root: this file is served from _static/

/**
 * The page's document name, as _toc.yml writes it: "book/01_3_parallel_vs_sequential" for
 * <root>/book/01_3_parallel_vs_sequential.html; null for a page outside the site's root.
 * @param {string} href  the page's address
 * @returns {string|null}
 */
export function docname(href) {
  const path = new URL(href).pathname;
  if (!path.startsWith(ROOT.pathname) || !path.endsWith('.html')) return null;
  return decodeURIComponent(path.slice(ROOT.pathname.length, -'.html'.length));
}

/**
 * Reads a number as a reader types it: "0.1", "1e-3", "1,000", "−2" (a minus sign), "12 %" is not one.
 * @param {string} text
 * @returns {number|null}  null when the text is not a number
 */
export function parseNumber(text) {
  const t = text.trim().replace(/\u2212/g, '-').replace(/(\d),(?=\d{3}\b)/g, '$1').replace(/[\s\u2009]/g, '');
  if (!/^[-+]?(\d+\.?\d*|\.\d+)(e[-+]?\d+)?$/i.test(t)) return null;
  return Number(t);
}

/**
 * The verdict on an answer.
 * @param {object} question  one question of quizzes.json: {choices: [{right, why}]} or {answer, tolerance, why, wrong}
 * @param {number|string} answer  the index of the chosen choice, or the text typed for a number
 * @returns {{right: boolean|null, why: string}}  right is null when the text typed is not a number
 */
export function judge(question, answer) {
  if (question.choices) {
    const choice = question.choices[answer];
    return {right: choice.right === true, why: choice.why};
  }
  const value = parseNumber(String(answer));
  if (value === null) return {right: null, why: `Type a number, such as ${question.example ?? 1}.`};
  const right = Math.abs(value - question.answer) <= question.tolerance;
  return {right, why: right ? question.why : question.wrong};
}

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, value);
  node.append(...children);
  return node;
}

function say(feedback, verdict) {
  const word = verdict.right === null ? 'A number, please.' : verdict.right ? 'Right.' : 'Not quite.';
  feedback.className = 'aiayn-quiz-feedback ' + (verdict.right ? 'is-right' : 'is-wrong');
  feedback.replaceChildren(el('strong', {}, word), ' ' + verdict.why);
}

function questionView(question, id) {
  const feedback = el('p', {class: 'aiayn-quiz-feedback', 'aria-live': 'polite', id: `${id}-feedback`});
  const fieldset = el('fieldset', {class: 'aiayn-quiz-question', 'aria-describedby': feedback.id},
                      el('legend', {}, question.prompt));
  if (question.choices) {
    const list = el('div', {class: 'aiayn-quiz-choices'});
    question.choices.forEach((choice, index) => {
      const input = el('input', {type: 'radio', name: id, value: String(index)});
      input.addEventListener('change', () => say(feedback, judge(question, index)));
      list.append(el('label', {}, input, ' ' + choice.text));
    });
    fieldset.append(list, feedback);
    return fieldset;
  }
  const input = el('input', {type: 'text', inputmode: 'decimal', id: `${id}-value`, autocomplete: 'off',
                             size: '10'});
  const form = el('form', {class: 'aiayn-quiz-number'},
                  el('label', {for: input.id}, question.label ?? 'Your answer'), ' ', input,
                  question.unit ? ' ' + question.unit + ' ' : ' ',
                  el('button', {type: 'submit'}, 'Check'));
  form.addEventListener('submit', event => {
    event.preventDefault();
    say(feedback, judge(question, input.value));
  });
  fieldset.append(form, feedback);
  return fieldset;
}

/**
 * The quiz of one chapter, a <section> holding a closed <details>.
 * @param {{chapter: number, questions: object[]}} quiz
 * @returns {HTMLElement}
 */
export function quizView(quiz) {
  const id = `aiayn-quiz-${quiz.chapter}`;
  const count = quiz.questions.length;
  const details = el('details', {},
                     el('summary', {id: `${id}-title`},
                        el('span', {class: 'aiayn-quiz-title'}, `Check yourself: chapter ${quiz.chapter}`),
                        ` (${count} questions, answered on this page)`));
  quiz.questions.forEach((question, index) => details.append(questionView(question, `${id}-q${index + 1}`)));
  return el('section', {class: 'aiayn-quiz', id, 'data-aiayn-live': '', 'aria-labelledby': `${id}-title`}, details);
}

/** Where the quiz goes: before the article's last "Next:" paragraph, else at the end of its last section. */
function place(article, view) {
  const next = Array.from(article.querySelectorAll('p')).filter(p => /^\s*Next:/.test(p.textContent)).pop();
  if (next) next.before(view);
  else (article.querySelector(':scope > section') || article).append(view);
}

async function main() {
  const name = docname(location.href);
  const article = document.querySelector('article.bd-article');
  if (!name || !article) return;
  const response = await fetch(DATA);
  if (!response.ok) throw new Error(`${DATA} answered ${response.status}`);
  const quiz = (await response.json())[name];
  if (quiz) place(article, quizView(quiz));
}

main();
